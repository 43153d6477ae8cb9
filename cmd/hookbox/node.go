//go:build !hookbox_lite

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"hookbox.dev/hookbox/ebpf"
	"hookbox.dev/hookbox/internal/config"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/nodeagent"
	"hookbox.dev/hookbox/render/k8s"
	"hookbox.dev/hookbox/tracehelper"
)

// nodeFlags are tracer serve's --node flags.
type nodeFlags struct {
	on                           bool
	nri, pluginName, pluginIndex string
	kubeconfig, signingKey       string
}

func (n *nodeFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&n.on, "node", false, "run the Kubernetes node agent (an NRI plugin) instead of the rootless helper")
	f.StringVar(&n.nri, "nri-socket", nodeagent.DefaultSocket, "with --node: containerd's NRI socket")
	f.StringVar(&n.pluginName, "plugin-name", nodeagent.DefaultPluginName, "with --node: the NRI plugin name (one agent per name and index)")
	f.StringVar(&n.pluginIndex, "plugin-index", nodeagent.DefaultPluginIndex, "with --node: the NRI plugin index (two digits)")
	f.StringVar(&n.kubeconfig, "kubeconfig", "", "with --node: the API server's kubeconfig (default: the pod's service account)")
	f.StringVar(&n.signingKey, "signing-key", "", "with --node: the node's ed25519 key for the verdicts' attestations (default the host key, as for hookbox run)")
}

// serveNode runs the node agent until ctx ends.
func serveNode(ctx context.Context, h *hostFlags, n nodeFlags, stderr io.Writer) error {
	kube, err := nodeagent.NewAPIServer(n.kubeconfig)
	if err != nil {
		return err
	}
	signer, unsigned, err := runSigner(config.HostEnv(), n.signingKey, false)
	if err != nil {
		return err
	}
	cfg := nodeagent.Config{Socket: n.nri, PluginName: n.pluginName, PluginIndex: n.pluginIndex, Kube: kube,
		Signer: signer, Unsigned: unsigned, Version: version, Log: stderr,
		StateDir: filepath.Join(stateDirOr(h.stateDir), "node-agent")}
	tracer := tracehelper.NewBPFTracer(ebpf.Options{})
	defer tracer.Close()
	if err := tracer.Load(); err != nil {
		// Every container is then unchecked, with the reason.
		fmt.Fprintf(stderr, "hookbox node agent: %v; every hookbox pod will be unchecked\n", err)
	} else {
		cfg.Tracer = tracer
	}
	fmt.Fprintf(stderr, "hookbox node agent: NRI plugin %s-%s on %s\n", n.pluginIndex, n.pluginName, n.nri)
	return nodeagent.New(cfg).Run(ctx)
}

func newK8sCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "k8s", Short: "Kubernetes: the node agent's verdicts"}
	var namespace, kubeconfig, keyFile, dir string
	var jsonOut bool
	v := &cobra.Command{
		Use:   "verdict JOB",
		Short: "Fetch a Job's verdict from the node agent and verify it",
		Long: `Fetch the record the node agent wrote for JOB (the ConfigMap
hookbox-verdict-JOB in the namespace) and check it as hookbox verify checks
a run record: every file against result.json's digests, the verdict
recomputed from the render, trace and identities, and the attestation's
signature with --key, the node's public key (hookbox key show on the node).

Exit 0 only for a record that verifies with the verdict confirmed; 118 when
it does not verify; 124 for mismatch; 119 for unchecked, and when there is
no verdict (yet).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kube, err := nodeagent.NewAPIServer(kubeconfig)
			if err != nil {
				return err
			}
			cm, err := kube.ConfigMap(cmd.Context(), namespace, nodeagent.VerdictName(args[0]))
			if err != nil {
				return exitError{exitUnchecked, fmt.Sprintf("no verdict for job %s/%s: %v", namespace, args[0], err)}
			}
			if dir == "" {
				if dir, err = os.MkdirTemp("", "hookbox-verdict-"); err != nil {
					return err
				}
				defer os.RemoveAll(dir)
			} else if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			if err := nodeagent.WriteRecord(cm, dir); err != nil {
				return err
			}
			opts, err := checkOptions(dir, "", keyFile)
			if err != nil {
				return err
			}
			if opts.Verifier == nil {
				return usageError{errors.New("verdict needs --key PUB, the node's public key")}
			}
			c, err := launcher.CheckRecord(cmd.Context(), dir, opts)
			if err != nil {
				return err
			}
			return reportCheck(cmd, dir, c, jsonOut)
		},
	}
	v.Flags().StringVarP(&namespace, "namespace", "n", "default", "the Job's namespace")
	v.Flags().StringVar(&kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "the API server's kubeconfig")
	v.Flags().StringVar(&keyFile, "key", "", "the node's public key (PEM) the attestation must be signed with")
	v.Flags().StringVar(&dir, "out", "", "keep the fetched record in this directory (default: a temporary one)")
	v.Flags().BoolVar(&jsonOut, "json", false, "print the check as JSON")
	cmd.AddCommand(v, newAgentManifestCommand())
	return cmd
}

func newAgentManifestCommand() *cobra.Command {
	var o k8s.AgentOptions
	cmd := &cobra.Command{
		Use:   "agent-manifest",
		Short: "Print the node agent's DaemonSet, service account and RBAC",
		Long: `Print, as YAML, the node agent's ServiceAccount, its ClusterRole (ConfigMaps:
get, create, update; nothing else), one RoleBinding of it in each
--job-namespace (and no ClusterRoleBinding), and the DaemonSet running
hookbox tracer serve --node on every node (docs/node-agent.md says what
each privilege is for).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			objs, err := k8s.Agent(o)
			if err != nil {
				return usageError{err}
			}
			out, err := objs.Marshal()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Image, "image", "", "the image holding the static hookbox at "+k8s.AgentProgram+" (hookbox image build's proxy image), NAME@sha256:<hex>")
	f.StringVar(&o.Namespace, "namespace", "hookbox-system", "the agent's namespace")
	f.StringSliceVar(&o.JobNamespaces, "job-namespace", nil, "a namespace whose Jobs the agent judges (repeatable)")
	f.StringVar(&o.KeySecret, "key-secret", "", "the Secret holding the node key as attestation.key (default "+k8s.AgentName+"-key)")
	f.StringVar(&o.NRISocket, "nri-socket", "", "containerd's NRI socket on the node (default /var/run/nri/nri.sock)")
	return cmd
}
