// kdra-oracle: the real Kubernetes structured allocator (k8s.io/dynamic-resource-allocation/structured)
// behind `kdra allocate`'s contract, for kdra's differential tests. One binary per supported Kubernetes
// minor version; the module in ./v1.XX pins the library version and maps feature gates to allocator
// features exactly as that release's kube-scheduler does (features.go there).
//
// Protocol: one JSON document per line on stdin, one answer per line on stdout, in order, so one
// process serves many cases. A case:
//
//	{"id": "...", "gates": {"DRAConsumableCapacity": true, ...},
//	 "nodes": [Node...], "deviceClasses": [...], "resourceSlices": [...],
//	 "allocatedClaims": [ResourceClaim with status.allocation...],
//	 "groups": [[ResourceClaim...], ...], "timeoutSeconds": 10}
//
// Each group (one pod's claims) is allocated in turn as kube-scheduler places a pod: the allocator runs on
// every node, in the given order (Filter); a node that fails with ErrFailedAllocationOnNode is
// unschedulable; any other error on any node ends the case (later groups are not tried), as the scheduling
// attempt fails and `kdra allocate` exits 3. Among the nodes that fit, DynamicResources' score decides
// (draScores; ties to the first in the given order), and the winner's results count as in use for the
// later groups. Objects are defaulted as the API server
// stores them (allocationMode, count, toleration operator). The answer:
//
//	{"id": "...", "variant": "incubating", "groups": [
//	   {"outcome": "allocation", "node": "n1", "allocations": [AllocationResult...], "scores": {"n1": 100},
//	    "allocateOne": 12},
//	   {"outcome": "unschedulable", "nodeErrors": {"n2": "invalid resource pools were encountered"}},
//	   {"outcome": "error", "node": "n1", "error": "claim c, request r: ..."},
//	   {"outcome": "timeout", "node": "n1"}]}
//
// A malformed line gets {"id": ..., "fatal": "..."} and the process continues.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"sigs.k8s.io/json"
)

type oracleCase struct {
	ID              string                         `json:"id"`
	Gates           map[string]bool                `json:"gates"`
	Nodes           []*v1.Node                     `json:"nodes"`
	DeviceClasses   []*resourceapi.DeviceClass     `json:"deviceClasses"`
	ResourceSlices  []*resourceapi.ResourceSlice   `json:"resourceSlices"`
	AllocatedClaims []*resourceapi.ResourceClaim   `json:"allocatedClaims"`
	Groups          [][]*resourceapi.ResourceClaim `json:"groups"`
	TimeoutSeconds  float64                        `json:"timeoutSeconds"`
}

type groupAnswer struct {
	Outcome     string                         `json:"outcome"`
	Node        string                         `json:"node,omitempty"`
	Allocations []resourceapi.AllocationResult `json:"allocations,omitempty"`
	Error       string                         `json:"error,omitempty"`
	NodeErrors  map[string]string              `json:"nodeErrors,omitempty"`
	Scores      map[string]int64               `json:"scores,omitempty"`
	AllocateOne int64                          `json:"allocateOne"`
	Seconds     float64                        `json:"seconds"`
}

type answer struct {
	ID      string        `json:"id"`
	Version string        `json:"version"`
	Variant string        `json:"variant,omitempty"`
	Groups  []groupAnswer `json:"groups,omitempty"`
	Fatal   string        `json:"fatal,omitempty"`
}

// classLister fails like kube-scheduler's informer lister for a missing class.
type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "deviceclass"}, name)
}

// celCaches: one per CEL feature set, reused across cases (as kube-scheduler keeps one per plugin).
var celCaches = map[cel.Features]*cel.Cache{}

func celCache(f cel.Features) *cel.Cache {
	c, ok := celCaches[f]
	if !ok {
		c = cel.NewCache(1000, f)
		celCaches[f] = c
	}
	return c
}

func defaultClaim(claim *resourceapi.ResourceClaim) {
	for i := range claim.Spec.Devices.Requests {
		r := &claim.Spec.Devices.Requests[i]
		if r.Exactly != nil {
			defaultExact(r.Exactly)
		}
		for j := range r.FirstAvailable {
			s := &r.FirstAvailable[j]
			if s.AllocationMode == "" {
				s.AllocationMode = resourceapi.DeviceAllocationModeExactCount
			}
			if s.AllocationMode == resourceapi.DeviceAllocationModeExactCount && s.Count == 0 {
				s.Count = 1
			}
			for k := range s.Tolerations {
				if s.Tolerations[k].Operator == "" {
					s.Tolerations[k].Operator = resourceapi.DeviceTolerationOpEqual
				}
			}
		}
	}
}

func defaultExact(r *resourceapi.ExactDeviceRequest) {
	if r.AllocationMode == "" {
		r.AllocationMode = resourceapi.DeviceAllocationModeExactCount
	}
	if r.AllocationMode == resourceapi.DeviceAllocationModeExactCount && r.Count == 0 {
		r.Count = 1
	}
	for k := range r.Tolerations {
		if r.Tolerations[k].Operator == "" {
			r.Tolerations[k].Operator = resourceapi.DeviceTolerationOpEqual
		}
	}
}

// allocatedState is kube-scheduler's claim tracker view (dra_manager.go GatherAllocatedState and
// allocateddevices.go foreachAllocatedDevice); how a share is recorded differs per version (state.go).
func allocatedState(claims []*resourceapi.ResourceClaim, consumableCapacity bool) structured.AllocatedState {
	state := newAllocatedState()
	for _, claim := range claims {
		if claim.Status.Allocation == nil {
			continue
		}
		for _, result := range claim.Status.Allocation.Devices.Results {
			if result.AdminAccess != nil && *result.AdminAccess {
				continue
			}
			id := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
			if result.ShareID != nil {
				if consumableCapacity {
					markShared(&state, id, result.ShareID)
					if result.ConsumedCapacity != nil {
						state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, result.ConsumedCapacity))
					}
					continue
				}
			}
			state.AllocatedDevices.Insert(id)
		}
	}
	return state
}

// allocateOneCalls reads the allocator's internal statistics (internal.Stats, not importable).
func allocateOneCalls(a structured.Allocator) int64 {
	m := reflect.ValueOf(a).MethodByName("GetStats")
	if !m.IsValid() {
		return -1
	}
	out := m.Call(nil)
	if len(out) != 1 {
		return -1
	}
	f := out[0].FieldByName("NumAllocateOneInvocations")
	if !f.IsValid() {
		return -1
	}
	return f.Int()
}

func variantOf(a structured.Allocator) string {
	m := reflect.ValueOf(a).MethodByName("Channel")
	if !m.IsValid() {
		return ""
	}
	return fmt.Sprint(m.Call(nil)[0].Interface())
}

func run(c *oracleCase) answer {
	ans := answer{ID: c.ID, Version: kubernetesVersion}
	features, celFeatures, err := allocatorFeatures(c.Gates)
	if err != nil {
		ans.Fatal = err.Error()
		return ans
	}
	classes := classLister{}
	for _, cl := range c.DeviceClasses {
		classes[cl.Name] = cl
	}
	timeout := time.Duration(c.TimeoutSeconds * float64(time.Second))
	if timeout <= 0 {
		timeout = 10 * time.Second // kube-scheduler's default DRA Filter timeout
	}
	inUse := append([]*resourceapi.ResourceClaim(nil), c.AllocatedClaims...)
	cache := celCache(celFeatures)
	for _, group := range c.Groups {
		for _, claim := range group {
			defaultClaim(claim)
		}
		ga := groupAnswer{Outcome: "unschedulable"}
		state := allocatedState(inUse, features.ConsumableCapacity)
		ctx := context.Background()
		alloc, err := newAllocator(ctx, features, state, classes, c.ResourceSlices, cache)
		if err != nil {
			ans.Fatal = err.Error()
			return ans
		}
		ans.Variant = variantOf(alloc)
		stop := false
		fits := map[string][]resourceapi.AllocationResult{}
		var order []string
		for _, node := range c.Nodes {
			nctx, cancel := context.WithTimeout(ctx, timeout)
			start := time.Now()
			results, err := alloc.Allocate(nctx, node, group)
			cancel()
			ga.Seconds += time.Since(start).Seconds()
			ga.AllocateOne = allocateOneCalls(alloc)
			if err != nil {
				if errors.Is(err, structured.ErrFailedAllocationOnNode) {
					if ga.NodeErrors == nil {
						ga.NodeErrors = map[string]string{}
					}
					ga.NodeErrors[node.Name] = err.Error()
					continue
				}
				if errors.Is(err, context.DeadlineExceeded) || nctx.Err() != nil && strings.Contains(err.Error(), "context") {
					ga = groupAnswer{Outcome: "timeout", Node: node.Name, Error: err.Error(), Seconds: ga.Seconds, AllocateOne: ga.AllocateOne}
					stop = true
					break
				}
				// findNodesThatPassFilters: an error on any node ends the scheduling attempt.
				ga = groupAnswer{Outcome: "error", Node: node.Name, Error: err.Error(), Seconds: ga.Seconds, AllocateOne: ga.AllocateOne}
				stop = true
				break
			}
			if results == nil {
				continue
			}
			fits[node.Name] = results
			order = append(order, node.Name)
		}
		if !stop && len(order) > 0 {
			scores := draScores(group, fits, order, features.PrioritizedList)
			best := order[0]
			for _, name := range order {
				if scores[name] > scores[best] {
					best = name
				}
			}
			results := fits[best]
			ga = groupAnswer{Outcome: "allocation", Node: best, Allocations: results, NodeErrors: ga.NodeErrors, Scores: scores, Seconds: ga.Seconds, AllocateOne: ga.AllocateOne}
			for i, claim := range group {
				done := claim.DeepCopy()
				done.Status.Allocation = &results[i]
				inUse = append(inUse, done)
			}
		}
		ans.Groups = append(ans.Groups, ga)
		if stop {
			break
		}
	}
	return ans
}

// libraryVersion: the k8s.io/dynamic-resource-allocation this binary was built with (its go.mod pins it).
func libraryVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "k8s.io/dynamic-resource-allocation" {
				return dep.Path + " " + dep.Version
			}
		}
	}
	return "k8s.io/dynamic-resource-allocation (unknown version)"
}

// draScores is kube-scheduler's DynamicResources Score on every node that fits (computeScore in
// pkg/scheduler/framework/plugins/dynamicresources, 1.35+: per firstAvailable request, 8 minus the index of
// the subrequest that got the devices), then NormalizeScore (helper.DefaultNormalizeScore: scaled so the
// best node gets 100). With the plugin the only one that tells these nodes apart (they carry labels only),
// the highest score wins and a tie goes to the first node in the given order, as `kdra allocate` documents.
func draScores(group []*resourceapi.ResourceClaim, fits map[string][]resourceapi.AllocationResult, order []string, enabled bool) map[string]int64 {
	scores := map[string]int64{}
	var top int64
	for _, name := range order {
		var score int64
		if enabled {
			for i, claim := range group {
				chosen := sets.New[string]()
				for _, res := range fits[name][i].Devices.Results {
					chosen.Insert(res.Request)
				}
				for _, req := range claim.Spec.Devices.Requests {
					for j, sub := range req.FirstAvailable {
						if chosen.Has(req.Name + "/" + sub.Name) {
							score += int64(resourceapi.FirstAvailableDeviceRequestMaxSize - j)
						}
					}
				}
			}
		}
		scores[name] = score
		if score > top {
			top = score
		}
	}
	if top > 0 {
		for name, score := range scores {
			scores[name] = 100 * score / top
		}
	}
	return scores
}

// sortedGates is for error messages only.
func sortedGates(g map[string]bool) []string {
	out := make([]string, 0, len(g))
	for k := range g {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println(kubernetesVersion, libraryVersion())
		return
	}
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriterSize(os.Stdout, 1<<20)
	defer out.Flush()
	for {
		line, err := in.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 {
			var c oracleCase
			var ans answer
			if uerr := json.UnmarshalCaseSensitivePreserveInts(line, &c); uerr != nil {
				ans = answer{ID: c.ID, Version: kubernetesVersion, Fatal: "decode: " + uerr.Error()}
			} else {
				ans = run(&c)
			}
			data, merr := stdjsonMarshal(ans)
			if merr != nil {
				data = []byte(fmt.Sprintf(`{"id":%q,"fatal":%q}`, c.ID, merr.Error()))
			}
			out.Write(data)
			out.WriteByte('\n')
			out.Flush()
		}
		if err != nil {
			return
		}
	}
}
