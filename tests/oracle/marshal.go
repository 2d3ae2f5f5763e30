package main

import stdjson "encoding/json"

func stdjsonMarshal(v any) ([]byte, error) { return stdjson.Marshal(v) }
