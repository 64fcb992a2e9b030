package cli

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/troupe-ml/troupe/elastic"
	"github.com/troupe-ml/troupe/train"
)

const k8sDir = "../deploy/k8s"

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

// k8sManifests are the manifests of deploy/k8s, decoded strictly into
// their Kubernetes API types, by file name.
type k8sManifests struct {
	svc corev1.Service
	pvc corev1.PersistentVolumeClaim
	job batchv1.Job
	pdb policyv1.PodDisruptionBudget
}

// objects are the manifests by file name, as kustomization.yaml lists them.
func (m *k8sManifests) objects() map[string]any {
	return map[string]any{"service.yaml": &m.svc, "pvc.yaml": &m.pvc, "job.yaml": &m.job, "pdb.yaml": &m.pdb}
}

// readK8s decodes every manifest of deploy/k8s and checks that
// kustomization.yaml lists exactly them, each of the kind and API version
// expected.
func readK8s(t *testing.T) *k8sManifests {
	t.Helper()
	m := &k8sManifests{}
	var kust struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	decodeStrict(t, "kustomization.yaml", &kust)
	files, _ := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	var names []string
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" {
			names = append(names, b)
		}
	}
	want := slices.Sorted(func(yield func(string) bool) {
		for k := range m.objects() {
			if !yield(k) {
				return
			}
		}
	})
	if !slices.Equal(names, want) || !slices.Equal(slices.Sorted(slices.Values(kust.Resources)), want) {
		t.Fatalf("deploy/k8s has %v and kustomization.yaml lists %v; want %v", names, kust.Resources, want)
	}
	for f, obj := range m.objects() {
		decodeStrict(t, f, obj)
	}
	for f, got := range map[string]string{
		"service.yaml": m.svc.APIVersion + " " + m.svc.Kind, "pvc.yaml": m.pvc.APIVersion + " " + m.pvc.Kind,
		"job.yaml": m.job.APIVersion + " " + m.job.Kind, "pdb.yaml": m.pdb.APIVersion + " " + m.pdb.Kind,
	} {
		if want := map[string]string{"service.yaml": "v1 Service", "pvc.yaml": "v1 PersistentVolumeClaim",
			"job.yaml": "batch/v1 Job", "pdb.yaml": "policy/v1 PodDisruptionBudget"}[f]; got != want {
			t.Fatalf("%s is a %s, want a %s", f, got, want)
		}
	}
	return m
}

// k8sAgent is the agent container of the Job's pods, with its args
// expanded as the kubelet does and parsed and validated as troupe agent's
// flags, with the Secrets' files and key in place.
type k8sAgent struct {
	c        corev1.Container
	args     []string
	flags    *agentFlags
	ac       train.AgentConfig
	key      string
	tlsMount string
}

func parseK8sAgent(t *testing.T, m *k8sManifests) *k8sAgent {
	t.Helper()
	pod := m.job.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	a := &k8sAgent{c: pod.Containers[0]}
	c := a.c

	// The environment the kubelet gives: the downward API and the secret.
	env := map[string]string{}
	fieldValues := map[string]string{
		"metadata.annotations['batch.kubernetes.io/job-completion-index']": "1",
		"metadata.namespace": "ml", "status.podIP": "10.1.2.3",
	}
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
	for _, mnt := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == mnt.Name && v.Secret != nil {
				a.tlsMount = mnt.MountPath
				if !mnt.ReadOnly {
					t.Errorf("the secret volume %s is writable", mnt.Name)
				}
			}
		}
	}
	if a.tlsMount == "" {
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
	a.key = key
	t.Setenv("TROUPE_CLUSTER_KEY", key)

	// The args parse and validate as troupe agent's.
	for _, arg := range c.Args {
		arg = expandK8s(arg, env)
		if strings.Contains(arg, "$(") {
			t.Fatalf("arg %q references an unset variable", arg)
		}
		if rest, ok := strings.CutPrefix(arg, a.tlsMount+"/"); ok {
			arg = filepath.Join(secretFiles, rest)
		}
		a.args = append(a.args, arg)
	}
	if len(c.Command) > 0 || len(a.args) == 0 || a.args[0] != "agent" {
		t.Fatalf("command %v args %v: want the image's entrypoint with agent …", c.Command, a.args)
	}
	a.flags = &agentFlags{}
	cmd := newAgentCmdWith(a.flags)
	cmd.Flags().AddFlagSet(rootCmd.PersistentFlags()) // --log-format, --log-level
	if err := cmd.ParseFlags(a.args[1:]); err != nil {
		t.Fatalf("args %v: %v", a.args, err)
	}
	if a.ac, err = a.flags.config(cmd.Flags()); err != nil {
		t.Fatalf("args %v do not validate: %v", a.args, err)
	}
	return a
}

// under reports whether path is dir or inside it.
func under(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && filepath.IsAbs(path) && rel != ".." && !strings.HasPrefix(rel, "../")
}

// TestK8sManifests checks that the manifests of deploy/k8s agree with each
// other and with the agent: the container's args, as the kubelet expands
// them, parse and validate as troupe agent's flags; each pod's node name is
// its completion index's; the gossip port of --listen is the container's
// and the service's, over TCP and UDP; --join names the headless service,
// which publishes pods before they are ready; the probes ask the metrics
// server of --metrics-addr for paths it serves; the service and the
// PodDisruptionBudget select the Job's pods, and the budget, which can
// only be a number of pods for a Job, lets one go at a time; the pods run
// as the Dockerfile's non-root user, on a read-only root filesystem with
// every path the agent writes on a writable volume, with resource
// requests.
func TestK8sManifests(t *testing.T) {
	m := readK8s(t)
	svc, job, pdb := m.svc, m.job, m.pdb
	a := parseK8sAgent(t, m)
	c, ac, pod := a.c, a.ac, job.Spec.Template.Spec
	if ac.Name != "troupe-1" || !ac.TLS.On() || ac.Key != a.key {
		t.Fatalf("name %q (want the completion index's, troupe-1), TLS %+v, key from the env %v", ac.Name, ac.TLS, ac.Key == a.key)
	}

	// The service and the budget select the Job's pods (the Job selects
	// its own: its selector is generated).
	labels := job.Spec.Template.Labels
	matches := func(sel map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	if job.Spec.Selector != nil || !matches(svc.Spec.Selector) || pdb.Spec.Selector == nil || !matches(pdb.Spec.Selector.MatchLabels) {
		t.Fatalf("selectors do not select the pods' labels %v (or the Job sets its own selector)", labels)
	}
	if svc.Spec.ClusterIP != "None" || !svc.Spec.PublishNotReadyAddresses {
		t.Fatalf("service %q: clusterIP %q, publishNotReadyAddresses %v", svc.Name, svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses)
	}
	if job.Spec.Completions == nil {
		t.Fatal("the Job sets no completions")
	}
	n := *job.Spec.Completions
	if pdb.Spec.MaxUnavailable != nil || pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.Type != intstr.Int ||
		pdb.Spec.MinAvailable.IntVal != n-1 {
		t.Fatalf("PodDisruptionBudget maxUnavailable %v, minAvailable %v: want minAvailable %d (the Job's completions less one; "+
			"a Job has no scale subresource, so only a number of pods works)", pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable, n-1)
	}
	if int(n) < ac.MinNodes {
		t.Fatalf("%d agents never reach --min-nodes %d", n, ac.MinNodes)
	}

	// Ports: gossip on --listen's port, TCP and UDP, in the pod and the
	// service; --join is the service's DNS name at that port.
	host, lport, err := net.SplitHostPort(ac.Listen)
	if err != nil {
		t.Fatal(err)
	}
	gossip, _ := strconv.Atoi(lport)
	if host != "10.1.2.3" {
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
	csc := c.SecurityContext
	if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		t.Error("the container may escalate privileges")
	}
	if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
		t.Error("the container's root filesystem is writable")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pods get a service account token they do not use")
	}
	// Every path the agent writes is on a writable volume: TMPDIR on an
	// emptyDir, the checkpoints and the weights on the claim.
	writable := map[string]corev1.VolumeSource{}
	for _, mnt := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == mnt.Name && !mnt.ReadOnly {
				writable[mnt.MountPath] = v.VolumeSource
			}
		}
	}
	var tmpdir string
	for _, e := range c.Env {
		if e.Name == "TMPDIR" {
			tmpdir = e.Value
		}
	}
	onVolume := func(path string, ok func(corev1.VolumeSource) bool) bool {
		for dir, src := range writable {
			if under(path, dir) && ok(src) {
				return true
			}
		}
		return false
	}
	if !onVolume(tmpdir, func(s corev1.VolumeSource) bool { return s.EmptyDir != nil }) {
		t.Errorf("TMPDIR %q is not on a writable emptyDir", tmpdir)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("resource requests %v", c.Resources.Requests)
	}
	if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds < 30 {
		t.Error("terminationGracePeriodSeconds under 30 s: a leaving agent finishes its step first")
	}
}

// The checkpoints: every agent writes its shards into one --ckpt-dir on
// the ReadWriteMany claim (pods on several nodes write at once), the final
// weights (--save) go beside them, checkpoints are taken, and --resume
// makes a job started again continue from the latest one.
func TestK8sCheckpointsOnTheClaim(t *testing.T) {
	m := readK8s(t)
	a := parseK8sAgent(t, m)
	cfg, pod := a.ac.Train, m.job.Spec.Template.Spec
	if !slices.Contains(m.pvc.Spec.AccessModes, corev1.ReadWriteMany) {
		t.Errorf("the claim's access modes %v: every agent writes its checkpoint shards into it, from several nodes: want ReadWriteMany", m.pvc.Spec.AccessModes)
	}
	if m.pvc.Spec.Resources.Requests.Storage().IsZero() {
		t.Error("the claim requests no storage")
	}
	var mount string
	for _, v := range pod.Volumes {
		if v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != m.pvc.Name {
			continue
		}
		for _, mnt := range a.c.VolumeMounts {
			if mnt.Name == v.Name {
				if mnt.ReadOnly || v.PersistentVolumeClaim.ReadOnly {
					t.Errorf("the claim %s is mounted read-only", m.pvc.Name)
				}
				mount = mnt.MountPath
			}
		}
	}
	if mount == "" {
		t.Fatalf("the claim %s is not mounted in the agent's container", m.pvc.Name)
	}
	if !under(cfg.CkptDir, mount) || !under(cfg.Save, mount) {
		t.Errorf("--ckpt-dir %q and --save %q: want both on the claim, mounted at %s", cfg.CkptDir, cfg.Save, mount)
	}
	if !cfg.Resume || cfg.CkptEvery < 1 {
		t.Errorf("--resume %v, --ckpt-every %d: a job started again would train from scratch", cfg.Resume, cfg.CkptEvery)
	}
}

// orUnset is *p, or "unset".
func orUnset[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

// podFailureAction is what the Job controller does with a failed pod of
// job whose container exited with code (0 matches no rule: the Job API
// leaves exit 0 out of the check) and that has the conditions conds: the
// action of the first rule that matches, else Count (towards backoffLimit).
func podFailureAction(job *batchv1.Job, container string, code int32, conds ...corev1.PodConditionType) batchv1.PodFailurePolicyAction {
	if job.Spec.PodFailurePolicy == nil {
		return batchv1.PodFailurePolicyActionCount
	}
	for _, r := range job.Spec.PodFailurePolicy.Rules {
		if e := r.OnExitCodes; e != nil {
			if code == 0 || e.ContainerName != nil && *e.ContainerName != container {
				continue
			}
			if in := slices.Contains(e.Values, code); in == (e.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn) {
				return r.Action
			}
			continue
		}
		for _, p := range r.OnPodConditions {
			if slices.Contains(conds, p.Type) && (p.Status == "" || p.Status == corev1.ConditionTrue) {
				return r.Action
			}
		}
	}
	return batchv1.PodFailurePolicyActionCount
}

// A finished job is not restarted, and a failure that retrying cannot mend
// ends it: the workload is a batch/v1 Indexed Job (one index per agent, all
// started together) whose pods are never restarted in place; the first
// agent that exits 0 (only at the job's last step; e2e's
// TestAgentExitStatuses) completes it; a permanent failure (exit 1) or a
// bad command line (2) fails it at once; an agent that left on SIGTERM
// (the args' --leave-exit-code) or an evicted pod is replaced without
// counting; other failures count towards a finite backoffLimit.
func TestK8sJobRunsToCompletion(t *testing.T) {
	m := readK8s(t)
	job := &m.job
	a := parseK8sAgent(t, m)
	spec := job.Spec
	if spec.CompletionMode == nil || *spec.CompletionMode != batchv1.IndexedCompletion || spec.Completions == nil ||
		spec.Parallelism == nil || *spec.Completions != *spec.Parallelism || *spec.Completions < 1 {
		t.Fatalf("completionMode %s, completions %s, parallelism %s: want an Indexed Job with completions = parallelism",
			orUnset(spec.CompletionMode), orUnset(spec.Completions), orUnset(spec.Parallelism))
	}
	if rp := spec.Template.Spec.RestartPolicy; rp != corev1.RestartPolicyNever {
		t.Fatalf("restartPolicy %q, want Never (a podFailurePolicy needs it)", rp)
	}
	if sp := spec.SuccessPolicy; sp == nil || len(sp.Rules) != 1 || sp.Rules[0].SucceededIndexes != nil ||
		sp.Rules[0].SucceededCount == nil || *sp.Rules[0].SucceededCount != 1 {
		t.Fatalf("successPolicy %+v: want the Job complete once one agent exits 0 (the job reached its last step)", sp)
	}
	if spec.BackoffLimit == nil || *spec.BackoffLimit < 1 || *spec.BackoffLimit > 20 {
		t.Fatalf("backoffLimit %s: want a small positive bound on replaced crashes", orUnset(spec.BackoffLimit))
	}
	if spec.PodReplacementPolicy != nil && *spec.PodReplacementPolicy != batchv1.Failed {
		t.Fatalf("podReplacementPolicy %q: only Failed goes with a podFailurePolicy", *spec.PodReplacementPolicy)
	}
	leave := int32(a.flags.leaveExit)
	if leave == 0 {
		t.Fatal("no --leave-exit-code: an agent stopped by SIGTERM would exit 0, complete its index and never be replaced")
	}
	name := a.c.Name
	for _, c := range []struct {
		what  string
		code  int32
		conds []corev1.PodConditionType
		want  batchv1.PodFailurePolicyAction
	}{
		{"a permanent failure (exit 1)", 1, nil, batchv1.PodFailurePolicyActionFailJob},
		{"a bad command line (exit 2)", 2, nil, batchv1.PodFailurePolicyActionFailJob},
		{fmt.Sprintf("an agent that left on SIGTERM (exit %d)", leave), leave, nil, batchv1.PodFailurePolicyActionIgnore},
		{"an evicted agent that left", leave, []corev1.PodConditionType{corev1.DisruptionTarget}, batchv1.PodFailurePolicyActionIgnore},
		{"an agent killed with its node", 137, []corev1.PodConditionType{corev1.DisruptionTarget}, batchv1.PodFailurePolicyActionIgnore},
		{"an OOM-killed agent (exit 137)", 137, nil, batchv1.PodFailurePolicyActionCount},
	} {
		if got := podFailureAction(job, name, c.code, c.conds...); got != c.want {
			t.Errorf("%s: the Job's podFailurePolicy says %s, want %s", c.what, got, c.want)
		}
	}
}

// `kubectl kustomize deploy/k8s` renders exactly the manifests, unchanged
// (skipped where kubectl is not installed).
func TestK8sKustomizeRenders(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on PATH: `kubectl kustomize deploy/k8s` not checked (Debian's package: kubernetes-client)")
	}
	out, err := exec.Command(kubectl, "kustomize", k8sDir).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("kubectl kustomize %s: %v\n%s", k8sDir, err, stderr)
	}
	files := readK8s(t)
	rendered := &k8sManifests{}
	byKind := map[string]string{"Service": "service.yaml", "PersistentVolumeClaim": "pvc.yaml", "Job": "job.yaml", "PodDisruptionBudget": "pdb.yaml"}
	seen := map[string]bool{}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(out), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("rendered document: %v\n%s", err, doc)
		}
		f, ok := byKind[head.Kind]
		if !ok || seen[f] {
			t.Fatalf("kubectl kustomize rendered an unexpected %q:\n%s", head.Kind, doc)
		}
		seen[f] = true
		if err := yaml.UnmarshalStrict([]byte(doc), rendered.objects()[f]); err != nil {
			t.Fatalf("rendered %s: %v", head.Kind, err)
		}
	}
	for f, want := range files.objects() {
		if got := rendered.objects()[f]; !seen[f] || !reflect.DeepEqual(got, want) {
			t.Errorf("kubectl kustomize renders %s otherwise than the file says", f)
		}
	}
}

// dockerfileUser is the numeric user the Dockerfile's final stage runs as.
func dockerfileUser(t *testing.T) string {
	b, err := os.ReadFile("../Dockerfile")
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
