// Package k8svalidate holds no code: its tests check hookbox's Kubernetes
// output (render/k8s) against the API server's own create path, in process,
// with k8s.io/kubernetes v1.37.2: strict decoding, defaulting, conversion to
// the internal types, and rest.BeforeCreate with each kind's registry
// strategy, as `kubectl apply` to a v1.37 API server would run them (minus
// admission webhooks and quota).
//
// It is a module of its own (see go.mod) so that the main module does not
// depend on k8s.io/kubernetes, which needs a replace line per staging module
// and takes minutes to build cold. Run it with:
//
//	cd k8svalidate && go test ./...
package k8svalidate
