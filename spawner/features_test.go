package spawner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// waitDeleted watches until the named object is gone.
func waitDeleted(t *testing.T, ctx context.Context, kind, ns, name string) {
	t.Helper()
	sel := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
	var w watch.Interface
	var err error
	var exists func() bool
	switch strings.ToLower(kind) {
	case "pod":
		w, err = cluster.Client.CoreV1().Pods(ns).Watch(ctx, sel)
		exists = func() bool {
			_, e := cluster.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			return e == nil
		}
	case "persistentvolumeclaim":
		w, err = cluster.Client.CoreV1().PersistentVolumeClaims(ns).Watch(ctx, sel)
		exists = func() bool {
			_, e := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
			return e == nil
		}
	case "secret":
		w, err = cluster.Client.CoreV1().Secrets(ns).Watch(ctx, sel)
		exists = func() bool {
			_, e := cluster.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
			return e == nil
		}
	case "service":
		w, err = cluster.Client.CoreV1().Services(ns).Watch(ctx, sel)
		exists = func() bool {
			_, e := cluster.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
			return e == nil
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if !exists() {
		return
	}
	for ev := range w.ResultChan() {
		if ev.Type == watch.Deleted {
			return
		}
	}
	t.Fatalf("%s %s/%s was never deleted: %v", kind, ns, name, ctx.Err())
}

func TestInternalSSLSecretAndService(t *testing.T) {
	ns := newNamespace(t)
	s, err := New(naming.Server{Username: "heidi"}, Options{
		Client: cluster.Client, Registry: sharedRegistry(t), Config: baseConfig(ns),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := ctxTimeout(t, 90*time.Second)
	url, err := s.Start(ctx, StartOptions{SSL: &SSL{Key: []byte("KEY\n"), Cert: []byte("CERT\n"), CA: []byte("CA\n"), HubCA: []byte("HUB\n")}})
	if err != nil {
		t.Fatal(err)
	}
	st := s.State()
	if want := "https://" + st.DNSName + ":8888"; url != want {
		t.Errorf("URL = %q, want %q", url, want)
	}
	pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, st.PodName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := cluster.Client.CoreV1().Secrets(ns).Get(ctx, st.PodName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := cluster.Client.CoreV1().Services(ns).Get(ctx, st.PodName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for kind, owners := range map[string][]metav1.OwnerReference{"secret": secret.OwnerReferences, "service": svc.OwnerReferences} {
		if len(owners) != 1 || owners[0].UID != pod.UID {
			t.Errorf("%s owners = %+v, want the pod", kind, owners)
		}
	}
	if string(secret.Data["notebooks-ca_trust.crt"]) != "CA\nHUB\n" {
		t.Errorf("trust bundle = %q", secret.Data["notebooks-ca_trust.crt"])
	}
	var keyfile string
	for _, e := range pod.Spec.Containers[0].Env {
		if e.Name == "JUPYTERHUB_SSL_KEYFILE" {
			keyfile = e.Value
		}
	}
	if keyfile != "/etc/jupyterhub/ssl/ssl.key" {
		t.Errorf("JUPYTERHUB_SSL_KEYFILE = %q", keyfile)
	}
	if err := s.Stop(ctx, StopOptions{}); err != nil {
		t.Fatal(err)
	}
	// The garbage collector removes what the pod owned.
	waitDeleted(t, ctx, "secret", ns, secret.Name)
	waitDeleted(t, ctx, "service", ns, svc.Name)
}

func TestURLVariantsAndHooks(t *testing.T) {
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 60*time.Second)

	cfg := baseConfig(ns)
	cfg.ServicesEnabled = true
	s := newSpawner(t, naming.Server{Username: "ivan"}, cfg)
	url, err := s.Start(ctx, StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "http://" + s.State().DNSName + ":8888"; url != want {
		t.Errorf("services_enabled URL = %q, want %q", url, want)
	}

	cfg = baseConfig(ns)
	cfg.PodConnectIP = "jupyter-{username}.headless"
	cfg.Port = 9999
	var modified, after bool
	s, err = New(naming.Server{Username: "judy"}, Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: cfg,
		Hooks: Hooks{
			ModifyPod: func(_ context.Context, _ *Spawner, pod *corev1.Pod) error {
				modified = true
				pod.Labels["hooked"] = "yes"
				return nil
			},
			AfterPodCreated: func(_ context.Context, _ *Spawner, pod *corev1.Pod) error {
				after = pod.UID != ""
				return nil
			},
			PodURL: func(_ *Spawner, _ *reflector.Pod, u string) string { return u + "/lab" },
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	url, err = s.Start(ctx, StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if url != "http://jupyter-judy.headless:9999/lab" || !modified || !after {
		t.Errorf("URL = %q, ModifyPod ran %v, AfterPodCreated ran %v", url, modified, after)
	}
	pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, s.State().PodName, metav1.GetOptions{})
	if err != nil || pod.Labels["hooked"] != "yes" {
		t.Errorf("ModifyPod's change missing: %v, %v", pod.Labels, err)
	}

	// A failing AfterPodCreated deletes the pod and fails Start.
	s3, err := New(naming.Server{Username: "ken"}, Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: baseConfig(ns),
		Hooks: Hooks{AfterPodCreated: func(context.Context, *Spawner, *corev1.Pod) error { return errors.New("quota exceeded") }}})
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	_, err = s3.Start(ctx, StartOptions{})
	var se *StartError
	if !errors.As(err, &se) || se.Step != "hook" || !strings.Contains(err.Error(), "quota exceeded") {
		t.Fatalf("Start with a failing hook = %v", err)
	}
	if _, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, s3.State().PodName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod survived a failing AfterPodCreated (err %v)", err)
	}
}

func TestPVCEnsureReuseAndDeleteForever(t *testing.T) {
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 60*time.Second)
	cfg := baseConfig(ns)
	cfg.StoragePVCEnsure = true
	cfg.StorageCapacity = resource.MustParse("2Gi")
	cfg.Pod.Volumes = []corev1.Volume{{Name: "home", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim-{username}"}}}}
	cfg.Pod.VolumeMounts = []corev1.VolumeMount{{Name: "home", MountPath: "/home/{username}"}}

	s := newSpawner(t, naming.Server{Username: "liz"}, cfg)
	if _, err := s.Start(ctx, StartOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "claim-liz", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, _ := cluster.Client.CoreV1().Pods(ns).Get(ctx, s.State().PodName, metav1.GetOptions{})
	if pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "claim-liz" || pod.Spec.Containers[0].VolumeMounts[0].MountPath != "/home/liz" {
		t.Errorf("templated volume or mount not expanded: %+v / %+v", pod.Spec.Volumes[0], pod.Spec.Containers[0].VolumeMounts[0])
	}
	if s.State().PVCName != "claim-liz" {
		t.Errorf("state PVC = %q", s.State().PVCName)
	}
	if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
	// A second Start reuses the claim.
	if _, err := s.Start(ctx, StartOptions{}); err != nil {
		t.Fatal(err)
	}
	again, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "claim-liz", metav1.GetOptions{})
	if err != nil || again.UID != pvc.UID {
		t.Errorf("claim replaced on the second Start: %v", err)
	}
	if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}

	// A named server's DeleteForever leaves a claim its template does not
	// tie to the server (here the user's shared claim).
	cfgShared := cfg
	cfgShared.PVCNameTemplate = "claim-{username}"
	named := newSpawner(t, naming.Server{Username: "liz", Servername: "gpu"}, cfgShared)
	if err := named.DeleteForever(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "claim-liz", metav1.GetOptions{}); err != nil {
		t.Errorf("a named server's DeleteForever deleted the user's shared claim: %v", err)
	}
	if err := s.DeleteForever(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "claim-liz", metav1.GetOptions{}); err == nil && got.DeletionTimestamp == nil {
		t.Error("DeleteForever left the claim")
	}
}

// TestPVCForbiddenWithExistingClaim uses a fake clientset: a quota that
// forbids creating a claim that already exists cannot be produced on
// demand by the test cluster.
func TestPVCForbiddenWithExistingClaim(t *testing.T) {
	existing := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "claim-mia", Namespace: "ns"}}
	forbidden := func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "persistentvolumeclaims"}, "claim-mia", fmt.Errorf("exceeded quota"))
	}
	for _, tc := range []struct {
		name    string
		objects []runtime.Object
		wantErr bool
	}{{"claim exists", []runtime.Object{existing}, false}, {"no claim", nil, true}} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.objects...)
			client.PrependReactor("create", "persistentvolumeclaims", forbidden)
			cfg := baseConfig("ns")
			cfg.StorageCapacity = resource.MustParse("1Gi")
			cfg.StoragePVCEnsure = true
			s, err := New(naming.Server{Username: "mia"}, Options{Client: client, Registry: sharedRegistry(t), Config: cfg})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			o, perr := Plan(t.Context(), naming.Server{Username: "mia"}, cfg, StartOptions{})
			if perr != nil {
				t.Fatal(perr)
			}
			err = s.ensurePVC(t.Context(), &startRun{startID: "x"}, o.PVC)
			if (err != nil) != tc.wantErr || (err != nil && !apierrors.IsForbidden(err)) {
				t.Errorf("ensurePVC = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}
