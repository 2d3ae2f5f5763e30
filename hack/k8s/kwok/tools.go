//go:build tools

// Package tools pins the kwok command so that `go mod tidy` keeps it in go.mod.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
