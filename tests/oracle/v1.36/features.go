package main

import (
	"fmt"

	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

const kubernetesVersion = "1.36"

// allocatorFeatures: kube-scheduler v1.36.3 pkg/scheduler/framework/plugins/dynamicresources
// AllocatorFeatures and the plugin's cel.NewCache features. DRAListTypeAttributes reaches only CEL.
func allocatorFeatures(g map[string]bool) (structured.Features, cel.Features, error) {
	get := func(name string) bool { return g[name] }
	for _, name := range []string{"DRAAdminAccess", "DRAPrioritizedList", "DRAPartitionableDevices", "DRADeviceTaints",
		"DRADeviceBindingConditions", "DRAResourceClaimDeviceStatus", "DRAConsumableCapacity", "DRAListTypeAttributes"} {
		if _, ok := g[name]; !ok {
			return structured.Features{}, cel.Features{}, fmt.Errorf("gate %s missing (give every allocator gate; have %v)", name, sortedGates(g))
		}
	}
	return structured.Features{
			AdminAccess:            get("DRAAdminAccess"),
			PrioritizedList:        get("DRAPrioritizedList"),
			PartitionableDevices:   get("DRAPartitionableDevices"),
			DeviceTaints:           get("DRADeviceTaints"),
			DeviceBindingAndStatus: get("DRADeviceBindingConditions") && get("DRAResourceClaimDeviceStatus"),
			ConsumableCapacity:     get("DRAConsumableCapacity"),
		}, cel.Features{
			EnableConsumableCapacity: get("DRAConsumableCapacity"),
			EnableListTypeAttributes: get("DRAListTypeAttributes"),
		}, nil
}
