"""The scheduling cycle: queue, filters, DRA allocation per node, scoring, reserve and bind."""
