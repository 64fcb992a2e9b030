package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/troupe-ml/troupe/elastic"
)

const k8sDir = "../../deploy/k8s"

// decodeStrict decodes a manifest into its Kubernetes API type, refusing
// unknown or duplicated fields (a typo would be ignored by kubectl apply's
// default client, and would silently not do what it says).
func decodeStrict(t *testing.T, file string, into any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(k8sDir, file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// expandK8s expands $(VAR) as the kubelet does in a container's args.
func expandK8s(s string, env map[string]string) string {
	return regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// TestK8sManifests decodes every manifest of deploy/k8s strictly into the
// Kubernetes API types and checks that they agree with each other and with
// the agent: the container's args, as the kubelet expands them, parse and
// validate as troupe agent's flags (with the Secrets' files and key in
// place); the gossip port of --listen is the container's and the
// service's, over TCP and UDP; --join names the headless service, which
// publishes pods before they are ready; the probes ask the metrics server
// of --metrics-addr for paths it serves; the PodDisruptionBudget and the
// service select the StatefulSet's pods; the pods run as the Dockerfile's
// non-root user with resource requests.
func TestK8sManifests(t *testing.T) {
	var svc corev1.Service
	var sts appsv1.StatefulSet
	var pdb policyv1.PodDisruptionBudget
	decodeStrict(t, "service.yaml", &svc)
	decodeStrict(t, "statefulset.yaml", &sts)
	decodeStrict(t, "pdb.yaml", &pdb)
	var kust struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	decodeStrict(t, "kustomization.yaml", &kust)
	files, _ := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && !slices.Contains(kust.Resources, b) {
			t.Errorf("kustomization.yaml does not list %s", b)
		}
	}
	if svc.Kind != "Service" || sts.Kind != "StatefulSet" || pdb.Kind != "PodDisruptionBudget" {
		t.Fatalf("kinds %q %q %q", svc.Kind, sts.Kind, pdb.Kind)
	}

	// The service and the budget select the StatefulSet's pods.
	labels := sts.Spec.Template.Labels
	matches := func(sel map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	if !matches(sts.Spec.Selector.MatchLabels) || !matches(svc.Spec.Selector) || pdb.Spec.Selector == nil || !matches(pdb.Spec.Selector.MatchLabels) {
		t.Fatalf("selectors do not select the pods' labels %v", labels)
	}
	if svc.Spec.ClusterIP != "None" || !svc.Spec.PublishNotReadyAddresses || sts.Spec.ServiceName != svc.Name {
		t.Fatalf("service %q: clusterIP %q, publishNotReadyAddresses %v; the StatefulSet's serviceName %q", svc.Name, svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses, sts.Spec.ServiceName)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Fatalf("podManagementPolicy %q: agents must start together (the job forms once --min-nodes have met)", sts.Spec.PodManagementPolicy)
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Fatalf("PodDisruptionBudget maxUnavailable %v, want 1", pdb.Spec.MaxUnavailable)
	}

	pod := sts.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]

	// The environment the kubelet gives: the downward API and the secret.
	env := map[string]string{}
	fieldValues := map[string]string{"metadata.name": "troupe-1", "metadata.namespace": "ml", "status.podIP": "10.1.2.3"}
	var keySecret *corev1.SecretKeySelector
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			v, ok := fieldValues[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				t.Fatalf("env %s from unexpected field %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env[e.Name] = v
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			if e.Name != "TROUPE_CLUSTER_KEY" {
				t.Fatalf("env %s from a secret: the agent reads the cluster key from TROUPE_CLUSTER_KEY", e.Name)
			}
			keySecret = e.ValueFrom.SecretKeyRef
		default:
			env[e.Name] = e.Value
		}
	}
	if keySecret == nil || keySecret.Name == "" || keySecret.Key == "" {
		t.Fatal("the cluster key does not come from a Secret")
	}

	// The TLS files: the secret volume's keys under its mount path, made
	// here by troupe certs as README.md says to make the Secret.
	var tlsMount string
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				tlsMount = m.MountPath
				if !m.ReadOnly {
					t.Errorf("the secret volume %s is writable", m.Name)
				}
			}
		}
	}
	if tlsMount == "" {
		t.Fatal("no secret volume mounted")
	}
	certs := t.TempDir()
	if err := runCerts(&bytes.Buffer{}, certsFlags{out: certs, nodes: "troupe-node", valid: time.Hour, caName: "k8s test CA"}); err != nil {
		t.Fatal(err)
	}
	secretFiles := t.TempDir()
	for key, from := range map[string]string{"ca.crt": "ca.pem", "tls.crt": "troupe-node.pem", "tls.key": "troupe-node-key.pem"} {
		b, err := os.ReadFile(filepath.Join(certs, from))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(secretFiles, key), b, 0o600)
	}
	key, err := elastic.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TROUPE_CLUSTER_KEY", key)

	// The args parse and validate as troupe agent's.
	var args []string
	for _, a := range c.Args {
		a = expandK8s(a, env)
		if strings.Contains(a, "$(") {
			t.Fatalf("arg %q references an unset variable", a)
		}
		if rest, ok := strings.CutPrefix(a, tlsMount+"/"); ok {
			a = filepath.Join(secretFiles, rest)
		}
		args = append(args, a)
	}
	if len(c.Command) > 0 || len(args) == 0 || args[0] != "agent" {
		t.Fatalf("command %v args %v: want the image's entrypoint with agent …", c.Command, args)
	}
	af := &agentFlags{}
	cmd := newAgentCmdWith(af)
	cmd.Flags().AddFlagSet(rootCmd.PersistentFlags()) // --log-format, --log-level
	if err := cmd.ParseFlags(args[1:]); err != nil {
		t.Fatalf("args %v: %v", args, err)
	}
	ac, err := af.config(cmd.Flags())
	if err != nil {
		t.Fatalf("args %v do not validate: %v", args, err)
	}
	if ac.Name != "troupe-1" || !ac.TLS.On() || ac.Key != key {
		t.Fatalf("name %q, TLS %+v, key from the env %v", ac.Name, ac.TLS, ac.Key == key)
	}

	// Ports: gossip on --listen's port, TCP and UDP, in the pod and the
	// service; --join is the service's DNS name at that port.
	_, lport, err := net.SplitHostPort(ac.Listen)
	if err != nil {
		t.Fatal(err)
	}
	gossip, _ := strconv.Atoi(lport)
	if host, _, _ := net.SplitHostPort(ac.Listen); host != "10.1.2.3" {
		t.Fatalf("--listen %s: want the pod's IP", ac.Listen)
	}
	containerPort := map[string]corev1.ContainerPort{}
	for _, p := range c.Ports {
		containerPort[p.Name] = p
	}
	for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP} {
		found := false
		for _, p := range c.Ports {
			found = found || p.ContainerPort == int32(gossip) && p.Protocol == proto
		}
		served := false
		for _, sp := range svc.Spec.Ports {
			cp, ok := containerPort[sp.TargetPort.String()]
			served = served || ok && cp.ContainerPort == int32(gossip) && sp.Protocol == proto && cp.Protocol == proto && sp.Port == int32(gossip)
		}
		if !found || !served {
			t.Errorf("gossip port %d/%s: in the pod %v, in the service %v", gossip, proto, found, served)
		}
	}
	if want := fmt.Sprintf("dns:%s.ml.svc.cluster.local:%d", svc.Name, gossip); len(ac.Join) != 1 || ac.Join[0] != want {
		t.Fatalf("--join %v, want %s", ac.Join, want)
	}

	// Probes: the metrics server's port and paths.
	_, mport, err := net.SplitHostPort(ac.Train.MetricsAddr)
	if err != nil {
		t.Fatalf("--metrics-addr %q: %v", ac.Train.MetricsAddr, err)
	}
	for name, pr := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if pr == nil || pr.HTTPGet == nil {
			t.Fatalf("no %s probe over HTTP", name)
		}
		cp, ok := containerPort[pr.HTTPGet.Port.String()]
		if !ok || strconv.Itoa(int(cp.ContainerPort)) != mport {
			t.Errorf("%s probe on port %s, the metrics server on %s", name, pr.HTTPGet.Port.String(), mport)
		}
		if want := map[string]string{"liveness": "/healthz", "readiness": "/readyz"}[name]; pr.HTTPGet.Path != want {
			t.Errorf("%s probe asks %s, want %s", name, pr.HTTPGet.Path, want)
		}
	}

	// Security and resources.
	dockerUser := dockerfileUser(t)
	sc := pod.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || strconv.FormatInt(*sc.RunAsUser, 10) != dockerUser {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and the Dockerfile's user %s", sc, dockerUser)
	}
	if c.SecurityContext == nil || c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation {
		t.Error("the container may escalate privileges")
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("resource requests %v", c.Resources.Requests)
	}
	if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds < 30 {
		t.Error("terminationGracePeriodSeconds under 30 s: a leaving agent finishes its step first")
	}
}

// dockerfileUser is the numeric user the Dockerfile's final stage runs as.
func dockerfileUser(t *testing.T) string {
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^USER (\d+)(?::\d+)?\s*$`).FindAllSubmatch(b, -1)
	if len(m) == 0 {
		t.Fatal("the Dockerfile sets no numeric USER")
	}
	u := string(m[len(m)-1][1])
	if u == "0" {
		t.Fatal("the Dockerfile runs as root")
	}
	return u
}
