"""The object store: get/list/watch/create/update/delete with resourceVersion and conflicts."""
