package service

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/spawner"
)

// A hub's own configuration drives its starts: the pod is what the hub's
// options make over the service's configuration; a running server keeps
// its pod when the hub's configuration changes, and is found by a
// restarted service although today's name templates (the service's) do
// not name it; the next start uses the new configuration.
func TestE2EHubConfig(t *testing.T) {
	e := newE2E(t)
	s := e.startService(t)
	const path = "/v1/users/alice/server"
	hubCfg := func(image string) string {
		return fmt.Sprintf(`{"image": %q, "pod_name_template": "hub-{username}", "extra_labels": {"hub": "a"},
			"environment": {"Z_FIRST": "1", "A_SECOND": "{username}"}}`, image)
	}
	s.status(t, "POST", path, `{"config": `+hubCfg("example.org/hub/lab:1")+`}`, http.StatusAccepted)
	if last := lastEvent(t, s, path); !last.data.Ready {
		t.Fatalf("the start ended with %+v, want ready", last)
	}
	st := s.status(t, "GET", path, "", http.StatusOK)
	pod := e.podOf(t, st)
	c := pod.Spec.Containers[0]
	if pod.Name != "hub-alice" || c.Image != "example.org/hub/lab:1" || pod.Labels["hub"] != "a" {
		t.Fatalf("pod %s: image %s, labels %v; want hub-alice from the hub's configuration", pod.Name, c.Image, pod.Labels)
	}
	expanded := false
	for _, v := range c.Env {
		expanded = expanded || v.Name == "A_SECOND" && v.Value == "alice"
	}
	if !expanded {
		t.Errorf("env %v: want A_SECOND=alice, the hub's environment template expanded", c.Env)
	}

	// A changed configuration leaves the running server alone.
	st = s.status(t, "POST", path, `{"config": `+hubCfg("example.org/hub/lab:2")+`}`, http.StatusOK)
	if again := e.podOf(t, st); again.UID != pod.UID || again.Spec.Containers[0].Image != "example.org/hub/lab:1" {
		t.Fatalf("POST with a new configuration while running replaced the pod (%s, %s)", again.UID, again.Spec.Containers[0].Image)
	}
	// A restarted service, whose own templates name the pod jupyter-alice,
	// finds hub-alice by its record.
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	s = e.startService(t)
	if st = s.status(t, "GET", path, "", http.StatusOK); st.Phase != "running" || e.podOf(t, st).UID != pod.UID {
		t.Fatalf("the restarted service reports %+v, want the running hub-alice", st)
	}
	// The next start, after a stop, uses the new configuration.
	if st = s.status(t, "DELETE", path, "", http.StatusOK); st.Phase != "stopped" {
		t.Fatalf("DELETE: %+v", st)
	}
	s.status(t, "POST", path, `{"config": `+hubCfg("example.org/hub/lab:2")+`}`, http.StatusAccepted)
	if last := lastEvent(t, s, path); !last.data.Ready {
		t.Fatalf("the second start ended with %+v, want ready", last)
	}
	st = s.status(t, "GET", path, "", http.StatusOK)
	if p := e.podOf(t, st); p.UID == pod.UID || p.Spec.Containers[0].Image != "example.org/hub/lab:2" {
		t.Errorf("after stop and start: pod %s image %s, want a new pod with the new image", p.UID, p.Spec.Containers[0].Image)
	}
	// The options form of the hub's profile list.
	resp, body := s.do(t, "POST", "/v1/users/alice/options-form", `{"config": {"profile_list": [{"display_name": "Hub's own GPU", "slug": "gpu"}]}}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Hub&#39;s own GPU") {
		t.Errorf("options form of the hub's profiles: %d %s", resp.StatusCode, body)
	}
	resp, body = s.do(t, "POST", "/v1/users/alice/options-from-form",
		`{"form_data": {"profile": ["gpu"], "profile-option-gpu--x": ["1"]}, "config": {"profile_list": [{"display_name": "GPU", "slug": "gpu"}]}}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"x":"1"`) {
		t.Errorf("options from form with the hub's configuration: %d %s", resp.StatusCode, body)
	}
}

// A hub's configuration that the policy forbids, or that is no
// configuration, is refused with a 400 naming the option before anything
// is created; the server stays unknown.
func TestE2EHubConfigRefused(t *testing.T) {
	e := newE2E(t)
	s := e.startService(t)
	huge := `{"extra_labels": {"a": "` + strings.Repeat("x", maxBodyBytes) + `"}}`
	deep := strings.Repeat(`{"a":`, 40) + `1` + strings.Repeat(`}`, 40)
	for _, tc := range []struct {
		name, config, want string
		code               int
	}{
		{"privileged", `{"privileged": true}`, "is privileged", http.StatusBadRequest},
		{"privileged init container", `{"init_containers": [{"name": "block", "image": "example.org/tools:1", "securityContext": {"privileged": true}}]}`, `init container "block" (init_containers) is privileged`, http.StatusBadRequest},
		{"capabilities", `{"container_security_context": {"capabilities": {"add": ["NET_ADMIN"]}}}`, "adds capabilities", http.StatusBadRequest},
		{"host path", `{"volumes": [{"name": "root", "hostPath": {"path": "/"}}], "volume_mounts": [{"name": "root", "mountPath": "/host"}]}`, `volume "root" is hostPath "/" (volumes)`, http.StatusBadRequest},
		{"host network", `{"extra_pod_config": {"hostNetwork": true}}`, "hostNetwork", http.StatusBadRequest},
		{"service account", `{"service_account": "cluster-admin"}`, `service account "cluster-admin" (service_account)`, http.StatusBadRequest},
		{"another namespace", `{"namespace": "kube-system"}`, `namespace "kube-system"`, http.StatusBadRequest},
		{"user namespaces", `{"enable_user_namespaces": true}`, "does not trust", http.StatusBadRequest},
		{"misspelt option", `{"imagee": "x"}`, `"imagee"`, http.StatusBadRequest},
		{"bad value", `{"cpu_limit": "lots"}`, "cpu_limit", http.StatusBadRequest},
		{"deeply nested", `{"extra_pod_config": ` + deep + `}`, "deep", http.StatusBadRequest},
		{"huge", huge, "", http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			user := "u-" + strings.ReplaceAll(tc.name, " ", "-")
			path := "/v1/users/" + user + "/server"
			resp, body := s.do(t, "POST", path, `{"config": `+tc.config+`}`)
			if resp.StatusCode != tc.code {
				t.Fatalf("POST: %d %.300s, want %d", resp.StatusCode, body, tc.code)
			}
			var e struct{ Error, Reason string }
			_ = json.Unmarshal(body, &e)
			if tc.code == http.StatusBadRequest && (e.Reason != reasonInvalidConfig || !strings.Contains(e.Error, tc.want)) {
				t.Errorf("error %q (%s), want reason %s naming %q", e.Error, e.Reason, reasonInvalidConfig, tc.want)
			}
			if resp, _ := s.do(t, "GET", path, ""); resp.StatusCode != http.StatusNotFound {
				t.Errorf("GET after the refusal: %d, want 404 (no server)", resp.StatusCode)
			}
		})
	}
	pods, err := e.c.Client.CoreV1().Pods(metav1.NamespaceAll).List(t.Context(), metav1.ListOptions{LabelSelector: "component=singleuser-server"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, "jupyter-u-") {
			t.Errorf("a refused start left pod %s/%s", p.Namespace, p.Name)
		}
	}

	// The policy lets the operator allow what a hub needs: z2jh's
	// metadata-blocking init container, by its image.
	e.policy = HubPolicy{PrivilegedImages: []string{"quay.io/jupyterhub/k8s-network-tools:*"}}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	s = e.startService(t)
	const path = "/v1/users/allowed/server"
	s.status(t, "POST", path, `{"config": {"init_containers": [{"name": "block-cloud-metadata", "image": "quay.io/jupyterhub/k8s-network-tools:4.4.0",
		"command": ["iptables"], "securityContext": {"privileged": true, "runAsUser": 0, "capabilities": {"add": ["NET_ADMIN"]}}}]}}`, http.StatusAccepted)
	resp, body := s.do(t, "POST", "/v1/users/other/server", `{"config": {"init_containers": [{"name": "x", "image": "quay.io/jupyterhub/k8s-network-tools-evil:1", "securityContext": {"privileged": true}}]}}`)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a privileged image outside the pattern: %d %s, want 400", resp.StatusCode, body)
	}
}

// lastEvent follows a start's progress to its final event.
func lastEvent(t *testing.T, s *e2eService, path string) sseEvent {
	t.Helper()
	events := s.progress(t, path+"/progress")
	return events[len(events)-1]
}

// The policy's checks on their own: what each bound refuses and allows.
func TestHubPolicyAdmit(t *testing.T) {
	yes := true
	for _, tc := range []struct {
		name   string
		policy HubPolicy
		spec   corev1.PodSpec
		want   string // "" admits
	}{
		{"plain", HubPolicy{}, corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook", Image: "x"}}}, ""},
		{"escalation", HubPolicy{}, corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook", Image: "x",
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &yes}}}}, "allows privilege escalation"},
		{"host port", HubPolicy{PrivilegedImages: []string{"*"}}, corev1.PodSpec{Containers: []corev1.Container{{Name: "n", Image: "x",
			Ports: []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}}}}}, "host port 80"},
		{"host port allowed", HubPolicy{HostNamespaces: true}, corev1.PodSpec{Containers: []corev1.Container{{Name: "n", Image: "x",
			Ports: []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}}}}}, ""},
		{"host path under", HubPolicy{HostPaths: []string{"/data"}}, corev1.PodSpec{Volumes: []corev1.Volume{{Name: "d",
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data/shared"}}}}}, ""},
		{"host path escapes", HubPolicy{HostPaths: []string{"/data"}}, corev1.PodSpec{Volumes: []corev1.Volume{{Name: "d",
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data/../etc"}}}}}, "hostPath"},
		{"host path sibling", HubPolicy{HostPaths: []string{"/data"}}, corev1.PodSpec{Volumes: []corev1.Volume{{Name: "d",
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/database"}}}}}, "hostPath"},
		{"hostPID", HubPolicy{}, corev1.PodSpec{HostPID: true}, "hostPID"},
		{"allowed account", HubPolicy{ServiceAccounts: []string{"lab"}}, corev1.PodSpec{ServiceAccountName: "lab"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.policy.Admit(objectsWith(tc.spec))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
	if err := (&HubPolicy{PrivilegedImages: []string{"[bad"}, HostPaths: []string{"relative"}}).Check(); err == nil ||
		!strings.Contains(err.Error(), "[bad") || !strings.Contains(err.Error(), "relative") {
		t.Errorf("Check = %v, want both entries named", err)
	}
}

func objectsWith(spec corev1.PodSpec) *spawner.Objects {
	return &spawner.Objects{Pod: &corev1.Pod{Spec: spec}}
}

// What is no configuration is refused before the base is touched.
func TestHubConfigsLoad(t *testing.T) {
	h := &hubConfigs{}
	for _, raw := range []string{`[1, 2]`, `"image"`, `{"a": `, strings.Repeat(`[`, 40) + strings.Repeat(`]`, 40)} {
		if _, err := h.load(json.RawMessage(raw)); err == nil {
			t.Errorf("load(%.40s) = nil error", raw)
		}
	}
	a, err := h.load(json.RawMessage(`{"image": "x/y:1"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.load(json.RawMessage(`{ "image" :  "x/y:1" }`))
	if err != nil || a != b {
		t.Errorf("the same configuration, spaced otherwise, loaded twice (%p, %p, %v)", a, b, err)
	}
	for i := range maxHubConfigs + 1 {
		if _, err := h.load(json.RawMessage(fmt.Sprintf(`{"image": "x/y:%d"}`, i+2))); err != nil {
			t.Fatal(err)
		}
	}
	if h.lru.Len() != maxHubConfigs || len(h.byKey) != maxHubConfigs {
		t.Errorf("kept %d (%d keys), want at most %d", h.lru.Len(), len(h.byKey), maxHubConfigs)
	}
	if _, err := (&hubConfigs{policy: HubPolicy{Refuse: true}}).load(json.RawMessage(`{}`)); err == nil || !strings.Contains(err.Error(), "hub_policy.refuse") {
		t.Errorf("a refusing policy: %v", err)
	}
}

// Two hubs sharing one service, each with its own configuration, never
// get each other's servers: a hub's request about another hub's server
// is answered as for an unknown one (404), its start is refused while
// that server is not stopped (409), its list leaves it out; the owner is
// recorded on the pod, so a restarted service keeps them apart; a start
// racing another hub's makes one pod; a stopped server may start for
// the other hub, and is then that hub's.
func TestE2ETwoHubs(t *testing.T) {
	e := newE2E(t)
	s := e.startService(t)
	a, b := s.as("hub-a"), s.as("hub-b")
	cfgA := `{"config": {"pod_name_template": "a-{username}", "extra_labels": {"hub": "a"}}}`
	cfgB := `{"config": {"pod_name_template": "b-{username}", "extra_labels": {"hub": "b"}}}`
	const alice = "/v1/users/alice/server"
	a.status(t, "POST", alice, cfgA, http.StatusAccepted)
	if last := lastEvent(t, a, alice); !last.data.Ready {
		t.Fatalf("hub a's start ended with %+v", last)
	}
	pod := e.podOf(t, a.status(t, "GET", alice, "", http.StatusOK))
	if pod.Name != "a-alice" {
		t.Fatalf("hub a's pod is %s, want a-alice", pod.Name)
	}
	notYours := func(svc *e2eService, method, path, body string, code int) {
		t.Helper()
		resp, data := svc.do(t, method, path, body)
		if resp.StatusCode != code {
			t.Errorf("%s %s as %s: %d %s, want %d", method, path, svc.hub, resp.StatusCode, data, code)
		}
	}
	check := func(svc *e2eService) {
		t.Helper()
		notYours(b, "GET", alice, "", http.StatusNotFound)
		notYours(b, "POST", alice, cfgB, http.StatusConflict)
		notYours(b, "PUT", alice+"/state", `{"pod_name": "a-alice", "namespace": "`+e.ns+`", "dns_name": "x"}`, http.StatusNotFound)
		notYours(b, "GET", alice+"/progress", "", http.StatusNotFound)
		notYours(b, "DELETE", alice, "", http.StatusNotFound)
		notYours(b, "DELETE", alice+"?forever=true", "", http.StatusNotFound)
		if again := e.podOf(t, svc.status(t, "GET", alice, "", http.StatusOK)); again.UID != pod.UID || again.DeletionTimestamp != nil {
			t.Errorf("hub b's requests touched hub a's pod (%s, deleting %v)", again.UID, again.DeletionTimestamp)
		}
		for hub, want := range map[*e2eService]int{a: 1, b: 0, s: 1} {
			_, data := hub.do(t, "GET", "/v1/servers", "")
			var list []serverStatus
			if err := json.Unmarshal(data, &list); err != nil || len(list) != want {
				t.Errorf("GET /v1/servers as %q: %s, want %d servers", hub.hub, data, want)
			}
		}
	}
	check(a)
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	s = e.startService(t)
	a, b = s.as("hub-a"), s.as("hub-b")
	check(a)

	// Two hubs start one user at once: one start, one pod.
	const carol = "/v1/users/carol/server"
	codes := make(chan int, 2)
	for _, svc := range []*e2eService{a, b} {
		go func() {
			x := svc.send(t.Context(), "POST", carol, cfgA)
			if x.err != nil {
				codes <- 0
				return
			}
			codes <- x.resp.StatusCode
		}()
	}
	got := []int{<-codes, <-codes}
	if !(got[0] == http.StatusAccepted && got[1] == http.StatusConflict || got[1] == http.StatusAccepted && got[0] == http.StatusConflict) {
		t.Errorf("two hubs starting carol at once: %v, want one 202 and one 409", got)
	}
	pods, err := e.c.Client.CoreV1().Pods(e.ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pods.Items {
		if p.Annotations["hub.jupyter.org/username"] == "carol" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("carol has %d pods, want 1", n)
	}

	// Stopped, alice may start for hub b, and is then b's.
	if st := a.status(t, "DELETE", alice, "", http.StatusOK); st.Phase != "stopped" {
		t.Fatalf("hub a's stop: %+v", st)
	}
	b.status(t, "POST", alice, cfgB, http.StatusAccepted)
	if last := lastEvent(t, b, alice); !last.data.Ready {
		t.Fatalf("hub b's start ended with %+v", last)
	}
	if p := e.podOf(t, b.status(t, "GET", alice, "", http.StatusOK)); p.Name != "b-alice" {
		t.Errorf("hub b's pod is %s, want b-alice", p.Name)
	}
	notYours(a, "GET", alice, "", http.StatusNotFound)

	// (Sent unchecked: openapi.yaml's pattern refuses it too.)
	x := s.as("Not_A_Label").send(t.Context(), "GET", alice, "")
	if x.err != nil {
		t.Fatal(x.err)
	}
	resp, data := x.resp, x.data
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(data), HubHeader) {
		t.Errorf("a malformed %s: %d %s, want 400 naming it", HubHeader, resp.StatusCode, data)
	}
}
