package nodeagent

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// APIServer is Kube through client-go: the ConfigMaps of the core group,
// nothing else (the agent's role allows no more, docs/node-agent.md).
type APIServer struct{ c corev1client.CoreV1Interface }

// NewAPIServer connects with kubeconfig, or with the pod's service account
// when kubeconfig is "" (the DaemonSet).
func NewAPIServer(kubeconfig string) (*APIServer, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("API server configuration (--kubeconfig, or the pod's service account): %w", err)
	}
	cfg.UserAgent = "hookbox-node-agent"
	c, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &APIServer{c: c}, nil
}

// ConfigMap implements Kube.
func (k *APIServer) ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	return k.c.ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
}

// PutConfigMap implements Kube: create, or update the existing one.
func (k *APIServer) PutConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	cms := k.c.ConfigMaps(cm.Namespace)
	_, err := cms.Create(ctx, cm, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	old, err := cms.Get(ctx, cm.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	cm.ResourceVersion = old.ResourceVersion
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	return err
}
