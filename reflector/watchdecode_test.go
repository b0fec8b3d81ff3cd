package reflector

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// protobufStream is client-go's protobuf watch event decoder: what
// watchEventDecoder wraps and must agree with.
func protobufStream(t testing.TB) runtime.Serializer {
	t.Helper()
	for _, info := range scheme.Codecs.WithoutConversion().SupportedMediaTypes() {
		if info.MediaType == runtime.ContentTypeProtobuf && info.StreamSerializer != nil {
			return info.StreamSerializer.Serializer
		}
	}
	t.Fatal("client-go's scheme has no protobuf stream serializer")
	return nil
}

// sameDecode decodes data into a WatchEvent with both decoders and
// reports how they differ ("" when they agree: both fail, or both make
// the same event and kind).
func sameDecode(whole runtime.Serializer, data []byte) string {
	var want, got metav1.WatchEvent
	_, wantKind, wantErr := whole.Decode(data, nil, &want)
	obj, gotKind, gotErr := watchEventDecoder{whole}.Decode(data, nil, &got)
	switch {
	case (wantErr == nil) != (gotErr == nil):
		return "errors differ: " + errString(gotErr) + " vs " + errString(wantErr)
	case wantErr != nil:
		return ""
	case obj != &got:
		return "the result is not the event given"
	case got.Type != want.Type:
		return "type " + got.Type + " vs " + want.Type
	case (got.Object.Raw == nil) != (want.Object.Raw == nil) || !bytes.Equal(got.Object.Raw, want.Object.Raw):
		return "object bytes differ"
	case got.Object.Object != nil:
		return "an object was decoded"
	case *gotKind != *wantKind:
		return "kind " + gotKind.String() + " vs " + wantKind.String()
	}
	return ""
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// encodedPod is a pod in Kubernetes' protobuf envelope, as a watch event
// carries it.
func encodedPod(t testing.TB) []byte {
	t.Helper()
	var proto runtime.Serializer
	for _, info := range scheme.Codecs.WithoutConversion().SupportedMediaTypes() {
		if info.MediaType == runtime.ContentTypeProtobuf {
			proto = info.Serializer
		}
	}
	var buf bytes.Buffer
	if err := proto.Encode(fullPod(), &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func bytesField(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

func rawExtension(raw []byte) []byte { return bytesField(nil, 1, raw) }

// watchEventPieces are fields a WatchEvent's encoding may hold, well
// formed or not, for the table and random tests to combine.
func watchEventPieces(pod []byte) [][]byte {
	return [][]byte{
		bytesField(nil, 1, []byte("ADDED")),
		bytesField(nil, 1, []byte("MODIFIED")),
		bytesField(nil, 1, []byte("DELETED")),
		bytesField(nil, 1, []byte("BOOKMARK")),
		bytesField(nil, 1, []byte("ERROR")),
		bytesField(nil, 1, []byte("SOMETHING-ELSE")),
		bytesField(nil, 1, nil),
		bytesField(nil, 2, rawExtension(pod)),
		bytesField(nil, 2, rawExtension([]byte("second object"))),
		bytesField(nil, 2, rawExtension(nil)), // present and empty
		bytesField(nil, 2, nil),               // an object without raw
		bytesField(nil, 2, append(rawExtension([]byte("x")), rawExtension([]byte("last raw wins"))...)),
		bytesField(nil, 2, protowire.AppendVarint(protowire.AppendTag(nil, 7, protowire.VarintType), 3)),
		bytesField(nil, 2, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 3)), // raw of the wrong type
		bytesField(nil, 2, []byte{0x0a, 0x05, 'a'}),                                                      // raw cut short
		protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1),                     // type of the wrong type
		protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 1),                     // object of the wrong type
		protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 300),                   // unknown fields
		protowire.AppendFixed32(protowire.AppendTag(nil, 10, protowire.Fixed32Type), 7),
		protowire.AppendFixed64(protowire.AppendTag(nil, 11, protowire.Fixed64Type), 7),
		bytesField(nil, 12, []byte("unknown")),
		{0x0a, 0x10, 'A'},  // a length past the end
		{0x80},             // a tag cut short
		{0x00, 0x01},       // field number 0
		{0x0b, 0x0c},       // a group start, then its end
		{0x0f},             // wire type 7
		{0xff, 0xff, 0xff}, // garbage
	}
}

// watchEventDecoder agrees with client-go's decoder on every combination
// of one to three pieces and on 20,000 random sequences, and passes
// anything but a WatchEvent through.
func TestWatchEventDecoderMatchesSerializer(t *testing.T) {
	whole := protobufStream(t)
	pieces := watchEventPieces(encodedPod(t))
	mismatches := 0
	check := func(data []byte) {
		if diff := sameDecode(whole, data); diff != "" {
			mismatches++
			if mismatches <= 5 {
				t.Errorf("%x: %s", data, diff)
			}
		}
	}
	check(nil)
	for _, a := range pieces {
		check(a)
		for _, b := range pieces {
			check(append(bytes.Clone(a), b...))
			for _, c := range pieces {
				check(append(append(bytes.Clone(a), b...), c...))
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20_000 {
		var data []byte
		for range rng.IntN(6) {
			data = append(data, pieces[rng.IntN(len(pieces))]...)
		}
		if rng.IntN(4) == 0 && len(data) > 0 {
			data = data[:rng.IntN(len(data))] // cut anywhere
		}
		check(data)
	}
	if mismatches > 0 {
		t.Fatalf("%d mismatches", mismatches)
	}
	// Not a WatchEvent: the wrapped serializer's answer.
	event := append(bytesField(nil, 1, []byte("ADDED")), bytesField(nil, 2, rawExtension(encodedPod(t)))...)
	var pod corev1.Pod
	if _, _, err := (watchEventDecoder{whole}).Decode(event, nil, &pod); err == nil {
		t.Error("decoding a watch event into a pod succeeded")
	}
}

// The object's bytes are the frame's own, not a copy, and an append to
// them cannot write into the frame.
func TestWatchEventDecoderAliasesTheFrame(t *testing.T) {
	pod := encodedPod(t)
	data := append(bytesField(nil, 1, []byte("MODIFIED")), bytesField(nil, 2, rawExtension(pod))...)
	data = append(data, bytesField(nil, 12, []byte("after"))...)
	var ev metav1.WatchEvent
	if _, _, err := (watchEventDecoder{protobufStream(t)}).Decode(data, nil, &ev); err != nil {
		t.Fatal(err)
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	at := uintptr(unsafe.Pointer(unsafe.SliceData(ev.Object.Raw)))
	if at < start || at+uintptr(len(ev.Object.Raw)) > start+uintptr(len(data)) {
		t.Fatal("the object's bytes were copied out of the frame")
	}
	if !bytes.Equal(ev.Object.Raw, pod) {
		t.Fatal("the object's bytes are not the pod's")
	}
	before := bytes.Clone(data)
	_ = append(ev.Object.Raw, "overwrite"...)
	if !bytes.Equal(data, before) {
		t.Error("an append to the object's bytes wrote into the frame")
	}
}

// Fuzzes doc.go's promise that TestWatchEventDecoderMatchesSerializer tests.
func FuzzWatchEventDecoder(f *testing.F) {
	whole := protobufStream(f)
	for _, p := range watchEventPieces(encodedPod(f)) {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if diff := sameDecode(whole, data); diff != "" {
			t.Errorf("%x: %s", data, diff)
		}
	})
}

// The pod informers' client decodes its watch streams with
// watchEventDecoder, and a watch through it delivers the pods as the
// typed client's watch does.
func TestKeptPodClientWatchesThroughWatchEventDecoder(t *testing.T) {
	client := kubernetes.NewForConfigOrDie(rest.CopyConfig(cluster.Config))
	kept, err := keptPodClient(client.CoreV1().RESTClient().(*rest.RESTClient))
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, info := range (keptPodCodecs{scheme.Codecs.WithoutConversion()}).SupportedMediaTypes() {
		if info.MediaType == runtime.ContentTypeProtobuf {
			_, found = info.StreamSerializer.Serializer.(watchEventDecoder)
		}
	}
	if !found {
		t.Fatal("the kept-pod codecs do not decode protobuf watch events with watchEventDecoder")
	}
	ctx := t.Context()
	ns := newNamespace(t)
	w, err := kept.Get().Namespace(ns).Resource("pods").Param("watch", "true").Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "watched", Labels: map[string]string{"a": "b"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	created, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ev := <-w.ResultChan()
	got, ok := ev.Object.(*corev1.Pod)
	if !ok || ev.Type != "ADDED" || got.Name != "watched" || got.UID != created.UID || got.Labels["a"] != "b" {
		t.Fatalf("watch event %s %T %+v", ev.Type, ev.Object, ev.Object)
	}
	if !reflect.DeepEqual(NewPod(got), NewPod(created)) {
		t.Errorf("the watched pod caches as %+v, the created one as %+v", NewPod(got), NewPod(created))
	}
}

// BenchmarkDecodeWatchEvent decodes a watch event carrying a realistic
// running server pod, as the API server sends it (managedFields
// included), the way client-go's watch decoder does: the event, then its
// object with keptPodDecoder. "copied" uses the generated Unmarshal for
// the event, "aliased" watchEventDecoder. docs/performance.md quotes its figures.
func BenchmarkDecodeWatchEvent(b *testing.B) {
	_, tmpl := realisticPodInNewNamespace(b, "watchdecode-")
	tmpl.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"} // the typed client's answer drops it
	var proto runtime.SerializerInfo
	for _, info := range scheme.Codecs.WithoutConversion().SupportedMediaTypes() {
		if info.MediaType == runtime.ContentTypeProtobuf {
			proto = info
		}
	}
	var buf bytes.Buffer
	if err := proto.Serializer.Encode(tmpl, &buf); err != nil {
		b.Fatal(err)
	}
	frame := append(bytesField(nil, 1, []byte("MODIFIED")), bytesField(nil, 2, rawExtension(buf.Bytes()))...)
	objects := keptPodDecoder{proto.Serializer}
	for _, bc := range []struct {
		name   string
		events runtime.Decoder
	}{{"copied", proto.StreamSerializer.Serializer}, {"aliased", watchEventDecoder{proto.StreamSerializer.Serializer}}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(frame)))
			for b.Loop() {
				var ev metav1.WatchEvent
				if _, _, err := bc.events.Decode(frame, nil, &ev); err != nil {
					b.Fatal(err)
				}
				if _, err := runtime.Decode(objects, ev.Object.Raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
