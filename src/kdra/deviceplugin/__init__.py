"""The device-plugin model of the same hardware, in one place, so kdra can compare DRA with it on equal terms:

- `advertise`: the extended resources a node's device plugins put in status.allocatable (NVIDIA, AMD, TPU);
- `pods`: a DRA-shaped pod as users write it for device plugins (claims -> integer extended resources,
  selectors -> GPU Feature Discovery product affinity);
- `kubelet`: the kubelet's device manager handing out device IDs to bound pods.
"""
