"""What kube-apiserver does with an object before anything reads it: admission (names, defaults) and the
validation rules of the DRA objects and the pod fields they use, with the API server's wording.

It sits above `kdra.cel` (selector expressions are compiled and their cost checked, as the API server
does) and below everything that reads objects from users.

- `kdra.validation.rules`: `validate(obj, ...)`, `validate_objects(objs, ...)`, `FieldError`.
- `kdra.validation.admission`: `admit(objs, ...)`, `generate_names(objs)`.
"""
