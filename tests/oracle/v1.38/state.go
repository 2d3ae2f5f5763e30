package main

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	draapi "k8s.io/dynamic-resource-allocation/api"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// The claim tracker records which devices have shares (dra_manager.go GatherAllocatedState), and the
// allocator reads slices in the library's internal form, converted as its informer converts them
// (api/informers.go).
func newAllocatedState() structured.AllocatedState {
	return structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.DeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
}

func markShared(state *structured.AllocatedState, id structured.DeviceID, _ *types.UID) {
	state.AllocatedSharedDeviceIDs.Insert(id)
}

func newAllocator(ctx context.Context, features structured.Features, state structured.AllocatedState,
	classes structured.DeviceClassLister, slices []*resourceapi.ResourceSlice, cache *cel.Cache) (structured.Allocator, error) {
	converted := make([]*draapi.ResourceSlice, 0, len(slices))
	for _, in := range slices {
		var out draapi.ResourceSlice
		if err := draapi.Convert_v1_ResourceSlice_To_api_ResourceSlice(in, &out, nil); err != nil {
			return nil, err
		}
		converted = append(converted, &out)
	}
	return structured.NewAllocator(ctx, features, state, classes, converted, cache)
}
