"""Hardware catalog and DRA drivers that publish ResourceSlices (simulated or discovered through NVML)."""
