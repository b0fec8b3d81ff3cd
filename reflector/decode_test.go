package reflector

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/randfill"

	"github.com/spawnkit/spawnkit/internal/testutil"
)

// checkDecode compares NewPod of decodeKeptPod(pod's bytes) with NewPod
// of the whole decoded pod.
func checkDecode(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	data, err := pod.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var whole corev1.Pod
	if err := whole.Unmarshal(data); err != nil {
		t.Fatal(err)
	}
	kept, err := decodeKeptPod(data)
	if err != nil {
		t.Fatalf("decodeKeptPod: %v", err)
	}
	if got, want := NewPod(kept), NewPod(&whole); !reflect.DeepEqual(got, want) {
		t.Errorf("from the kept fields:\n%+v\nfrom the whole pod:\n%+v", got, want)
	}
}

// Tests doc.go's promise: the pod informers' decoder makes the cached Pod NewPod makes of the whole pod.
func TestDecodeKeptPodMatchesUnmarshal(t *testing.T) {
	checkDecode(t, fullPod())
	checkDecode(t, &corev1.Pod{})
	f := randfill.NewWithSeed(1).NilChance(0.2).NumElements(0, 3)
	for i := range 2000 {
		var pod corev1.Pod
		f.Fill(&pod)
		// Random keys and types seldom hit what the cache keeps: some
		// conditions become Ready and PodScheduled, some annotations
		// spawnkit's.
		for j := range pod.Status.Conditions {
			switch (i + j) % 3 {
			case 0:
				pod.Status.Conditions[j].Type = corev1.PodReady
			case 1:
				pod.Status.Conditions[j].Type = corev1.PodScheduled
			}
		}
		for k, v := range pod.Annotations {
			if i%2 == 0 {
				pod.Annotations["spawnkit.dev/"+k] = v
			}
		}
		checkDecode(t, &pod)
	}
}

// Fuzzes doc.go's promise that TestDecodeKeptPodMatchesUnmarshal tests.
func FuzzDecodeKeptPod(f *testing.F) {
	data, _ := fullPod().Marshal()
	f.Add(data)
	f.Fuzz(func(t *testing.T, data []byte) {
		var whole corev1.Pod
		if whole.Unmarshal(data) != nil {
			return // not a pod: whatever decodeKeptPod says
		}
		kept, err := decodeKeptPod(data)
		if err != nil {
			// Malformed input the two tell apart differently (groups
			// with mismatched numbers, which gogo's skipping accepts):
			// the API server sends neither.
			return
		}
		if got, want := NewPod(kept), NewPod(&whole); !reflect.DeepEqual(got, want) {
			t.Errorf("from the kept fields:\n%+v\nfrom the whole pod:\n%+v", got, want)
		}
	})
}

// BenchmarkDecodePod compares the informer's decoding of a realistic
// running server pod, as the API server sends it (managedFields
// included), and its transform: the whole pod then NewPod, against the
// kept fields then NewPod. docs/performance.md quotes its figures.
func BenchmarkDecodePod(b *testing.B) {
	_, tmpl := realisticPodInNewNamespace(b, "decode-")
	data, err := tmpl.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("whole", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var p corev1.Pod
			if err := p.Unmarshal(data); err != nil {
				b.Fatal(err)
			}
			_ = NewPod(&p)
		}
	})
	b.Run("kept", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p, err := decodeKeptPod(data)
			if err != nil {
				b.Fatal(err)
			}
			_ = NewPod(p)
		}
	})
}

// The Registry's pod informers list and watch through keptPodDecoder.
func TestPodInformersDecodeKeptFields(t *testing.T) {
	ns := newNamespace(t)
	r := newRegistry(t, Options{})
	defer r.Close()
	before := keptPodDecodes.Load()
	createPod(t, ns, "kept-a", nil)
	pods := syncedPods(t, r, ns)
	createPod(t, ns, "kept-b", nil)
	testutil.Eventually(t, 20*time.Second, "kept-b cached", testutil.True(func() bool {
		p, ok, _ := pods.Get(t.Context(), ns, "kept-b")
		return ok && p.Labels.Get("component") == "singleuser-server" && p.UID != "" && p.ResourceVersion != ""
	}))
	if n := keptPodDecodes.Load() - before; n < 2 {
		t.Errorf("the kept-field decoder decoded %d pods or lists, want the list and the watched pod", n)
	}
}

// keptPodDecoder on its own: pods and pod lists in the protobuf envelope
// come out as the whole decode would make them (into the object given,
// when one is); a Status and a JSON pod go to the wrapped serializer.
func TestKeptPodDecoder(t *testing.T) {
	var proto runtime.SerializerInfo
	for _, info := range scheme.Codecs.WithoutConversion().SupportedMediaTypes() {
		if info.MediaType == runtime.ContentTypeProtobuf {
			proto = info
		}
	}
	dec := keptPodDecoder{proto.Serializer}
	encode := func(obj runtime.Object) []byte {
		t.Helper()
		var buf bytes.Buffer
		if err := proto.Serializer.Encode(obj, &buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	pod := fullPod()
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}}
	data := encode(pod)
	var into corev1.Pod
	got, gvk, err := dec.Decode(data, nil, &into)
	if err != nil || got != &into || gvk == nil || gvk.Kind != "Pod" {
		t.Fatalf("Decode(pod) = %T %v %v, want the given *corev1.Pod", got, gvk, err)
	}
	if !reflect.DeepEqual(NewPod(&into), NewPod(pod)) {
		t.Errorf("decoded pod caches as %+v, want %+v", NewPod(&into), NewPod(pod))
	}
	if into.ManagedFields != nil || len(into.Spec.Containers[0].Env) != 0 {
		t.Error("the decoder kept fields the cache drops")
	}
	list := &corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: "77", Continue: "next"}, Items: []corev1.Pod{*pod, *pod}}
	list.Items[1].Name = "second"
	var intoList corev1.PodList
	if got, _, err := dec.Decode(encode(list), nil, &intoList); err != nil || got != &intoList {
		t.Fatalf("Decode(list) = %T, %v", got, err)
	}
	if intoList.ResourceVersion != "77" || intoList.Continue != "next" || len(intoList.Items) != 2 || intoList.Items[1].Name != "second" ||
		!reflect.DeepEqual(NewPod(&intoList.Items[0]), NewPod(pod)) {
		t.Errorf("decoded list: meta %+v, %d items", intoList.ListMeta, len(intoList.Items))
	}
	status := &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old"}
	if got, _, err := dec.Decode(encode(status), nil, nil); err != nil {
		t.Fatal(err)
	} else if s, ok := got.(*metav1.Status); !ok || s.Code != 410 || s.Reason != metav1.StatusReasonExpired {
		t.Errorf("a Status decoded as %#v", got)
	}
	// A pod cut short in the middle of a field: an error that says what
	// was being decoded.
	podBytes, _ := pod.Marshal()
	typeMeta := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "v1")
	typeMeta = protowire.AppendString(protowire.AppendTag(typeMeta, 2, protowire.BytesType), "Pod")
	cut := append(slices.Clone(protobufMagic), protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), typeMeta)...)
	cut = protowire.AppendBytes(protowire.AppendTag(cut, 2, protowire.BytesType), podBytes[:len(podBytes)-3])
	if _, _, err := dec.Decode(cut, nil, nil); err == nil || !strings.Contains(err.Error(), "v1 Pod") {
		t.Errorf("a truncated pod: %v, want an error naming the v1 Pod", err)
	}
	if _, _, err := dec.Decode([]byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"j"}}`), nil, nil); err == nil {
		t.Error("the protobuf decoder accepted JSON")
	}
}
