package nodeagent

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// coreCodecs decode the core group alone, made on first use. client-go's
// typed clients would link its scheme of every API group, which cost every
// hookbox process (hookbox run included) about 16 MiB of resident memory
// at start for two commands that only need ConfigMaps.
var coreCodecs = sync.OnceValue(func() serializer.CodecFactory {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	return serializer.NewCodecFactory(s)
})

// APIServer is Kube through client-go's REST client: the ConfigMaps of the
// core group, nothing else (the agent's role allows no more,
// docs/node-agent.md).
type APIServer struct{ c rest.Interface }

// NewAPIServer connects with kubeconfig, or with the pod's service account
// when kubeconfig is "" (the DaemonSet).
func NewAPIServer(kubeconfig string) (*APIServer, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("API server configuration (--kubeconfig, or the pod's service account): %w", err)
	}
	cfg.UserAgent = "hookbox-node-agent"
	cfg.APIPath = "/api"
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = coreCodecs().WithoutConversion()
	c, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &APIServer{c: c}, nil
}

// ConfigMap implements Kube.
func (k *APIServer) ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	var cm corev1.ConfigMap
	err := k.c.Get().Namespace(namespace).Resource("configmaps").Name(name).Do(ctx).Into(&cm)
	if err != nil {
		return nil, err
	}
	return &cm, nil
}

// PutConfigMap implements Kube: create, or update the existing one.
func (k *APIServer) PutConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	err := k.c.Post().Namespace(cm.Namespace).Resource("configmaps").Body(cm).Do(ctx).Error()
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	old, err := k.ConfigMap(ctx, cm.Namespace, cm.Name)
	if err != nil {
		return err
	}
	cm.ResourceVersion = old.ResourceVersion
	return k.c.Put().Namespace(cm.Namespace).Resource("configmaps").Name(cm.Name).Body(cm).Do(ctx).Error()
}
