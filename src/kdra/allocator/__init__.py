"""The structured allocator with kube-scheduler 1.36 semantics, plus explanations of failures."""
