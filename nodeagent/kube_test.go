package nodeagent

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The REST client speaks the core group's wire format: a Get, a Create
// that finds the ConfigMap there and becomes an Update carrying its
// resourceVersion, and a 404 that is the API's NotFound. The server is
// the API server's part as its documented HTTP API gives it; the live
// cluster tests (cluster/verdict_test.go) use a real one.
func TestAPIServerConfigMaps(t *testing.T) {
	stored := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "hookbox-verdict-j", Namespace: "ns", ResourceVersion: "7"}, Data: map[string]string{"a": "old"}}
	var calls []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls = append(calls, r.Method+" "+r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/ns/configmaps/hookbox-verdict-j":
			json.NewEncoder(w).Encode(stored)
		case r.Method == http.MethodPost && r.URL.Path == "/api/v1/namespaces/ns/configmaps":
			w.WriteHeader(http.StatusConflict)
			json.NewEncoder(w).Encode(apierrors.NewAlreadyExists(corev1.Resource("configmaps"), "hookbox-verdict-j").ErrStatus)
		case r.Method == http.MethodPut && r.URL.Path == "/api/v1/namespaces/ns/configmaps/hookbox-verdict-j":
			var cm corev1.ConfigMap
			if err := json.NewDecoder(r.Body).Decode(&cm); err != nil {
				t.Errorf("update body: %v", err)
			}
			if cm.ResourceVersion != "7" || cm.Data["a"] != "new" || cm.Kind != "ConfigMap" {
				t.Errorf("update of %+v, want resourceVersion 7 and the new data", cm)
			}
			stored = &cm
			json.NewEncoder(w).Encode(cm)
		default:
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(apierrors.NewNotFound(corev1.Resource("configmaps"), "x").ErrStatus)
		}
	}))
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+srv.URL+`"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600)
	k, err := NewAPIServer(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cm, err := k.ConfigMap(t.Context(), "ns", "hookbox-verdict-j")
	if err != nil || cm.Data["a"] != "old" {
		t.Fatalf("get: %+v, %v", cm, err)
	}
	put := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "hookbox-verdict-j", Namespace: "ns"}, Data: map[string]string{"a": "new"}}
	if err := k.PutConfigMap(t.Context(), put); err != nil {
		t.Fatal(err)
	}
	if stored.Data["a"] != "new" {
		t.Fatalf("not updated: %+v (calls %v)", stored, calls)
	}
	if _, err := k.ConfigMap(t.Context(), "ns", "missing"); !apierrors.IsNotFound(err) {
		t.Fatalf("missing ConfigMap: %v, want NotFound", err)
	}
}
