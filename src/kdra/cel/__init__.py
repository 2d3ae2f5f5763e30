"""The DRA CEL environment (device.driver/attributes/capacity/allowMultipleAllocations)."""
