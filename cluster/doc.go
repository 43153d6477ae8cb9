// Package cluster holds hookbox's single-node Kubernetes for tests.
package cluster
