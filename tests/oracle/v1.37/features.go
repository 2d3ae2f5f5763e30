package main

import (
	"fmt"

	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

const kubernetesVersion = "1.37"

// allocatorFeatures: kube-scheduler v1.37.2 pkg/scheduler/framework/plugins/dynamicresources
// AllocatorFeatures and the plugin's cel.NewCache features.
func allocatorFeatures(g map[string]bool) (structured.Features, cel.Features, error) {
	get := func(name string) bool { return g[name] }
	for _, name := range []string{"DRAAdminAccess", "DRAPrioritizedList", "DRAPartitionableDevices", "DRADeviceTaints",
		"DRADeviceBindingConditions", "DRAResourceClaimDeviceStatus", "DRAConsumableCapacity", "DRAListTypeAttributes",
		"DRAFractionalCapacityRange", "DRAOptionalNodeOperations", "DRADerivedAttributes", "DRADeviceCompatibilityGroups"} {
		if _, ok := g[name]; !ok {
			return structured.Features{}, cel.Features{}, fmt.Errorf("gate %s missing (give every allocator gate; have %v)", name, sortedGates(g))
		}
	}
	return structured.Features{
			AdminAccess:             get("DRAAdminAccess"),
			PrioritizedList:         get("DRAPrioritizedList"),
			PartitionableDevices:    get("DRAPartitionableDevices"),
			DeviceTaints:            get("DRADeviceTaints"),
			DeviceBindingAndStatus:  get("DRADeviceBindingConditions") && get("DRAResourceClaimDeviceStatus"),
			ConsumableCapacity:      get("DRAConsumableCapacity"),
			FractionalCapacityRange: get("DRAFractionalCapacityRange"),
			ListTypeAttributes:      get("DRAListTypeAttributes"),
			OptionalNodeOperations:  get("DRAOptionalNodeOperations"),
			DerivedAttributes:       get("DRADerivedAttributes"),
			CompatibilityGroups:     get("DRADeviceCompatibilityGroups"),
		}, cel.Features{
			EnableConsumableCapacity: get("DRAConsumableCapacity"),
			EnableListTypeAttributes: get("DRAListTypeAttributes"),
		}, nil
}
