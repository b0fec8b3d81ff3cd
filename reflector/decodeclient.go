package reflector

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// keptPodClient is rc (the client's core/v1 REST client: its transport,
// credentials, timeout and rate limiter) with a protobuf decoder that
// decodes pods and pod lists with decodeKeptPod, for the pod informers'
// lists and watches. Everything else (a Status of a failed request or a
// watch error, JSON) is decoded as before. Not kept from rc: a content
// type the rest.Config chose (it always asks for protobuf) and its
// warning handler (the API server's warnings on these requests go to
// client-go's process-wide handler).
func keptPodClient(rc *rest.RESTClient) (*rest.RESTClient, error) {
	u := rc.Get().URL()
	base := *u
	base.Path, base.RawQuery = strings.TrimSuffix(u.Path, "/api/v1"), ""
	if base.Path == u.Path {
		return nil, fmt.Errorf("reflector: the core client's URL %s does not end in /api/v1", u)
	}
	gv := corev1.SchemeGroupVersion
	codecs := keptPodCodecs{scheme.Codecs.WithoutConversion()}
	return rest.NewRESTClient(&base, "/api/v1", rest.ClientContentConfig{
		AcceptContentTypes: runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON,
		ContentType:        runtime.ContentTypeProtobuf,
		GroupVersion:       gv,
		Negotiator:         runtime.NewClientNegotiator(codecs, gv),
	}, rc.GetRateLimiter(), rc.Client)
}

// keptPodCodecs is a NegotiatedSerializer whose protobuf object decoder is
// keptPodDecoder and whose protobuf watch event decoder is
// watchEventDecoder; the framing and the rest are the wrapped
// serializer's.
type keptPodCodecs struct{ runtime.NegotiatedSerializer }

func (c keptPodCodecs) SupportedMediaTypes() []runtime.SerializerInfo {
	infos := slices.Clone(c.NegotiatedSerializer.SupportedMediaTypes())
	for i := range infos {
		if infos[i].MediaType != runtime.ContentTypeProtobuf {
			continue
		}
		infos[i].Serializer = keptPodDecoder{infos[i].Serializer}
		if ss := infos[i].StreamSerializer; ss != nil {
			stream := *ss
			stream.Serializer = watchEventDecoder{ss.Serializer}
			infos[i].StreamSerializer = &stream
		}
	}
	return infos
}

// watchEventDecoder decodes a watch stream's protobuf frames into
// *metav1.WatchEvent without copying the event's object: Object.Raw is
// the object's bytes inside data. The generated Unmarshal copies them, a
// pod's whole encoding (managedFields and all) for every event, only for
// client-go to decode them at once and drop the copy; it was the largest
// allocation of a pod informer's watch. This is safe for the one caller
// it has: client-go's watch decoder (rest/watch.Decoder) decodes
// Object.Raw before it reads the next frame into the buffer data is in,
// and keptPodDecoder copies what it keeps. Anything else, and any frame
// that is not a well-formed WatchEvent of the expected wire types, goes
// to the wrapped serializer, whose answer (or error) is then the same as
// before.
type watchEventDecoder struct{ runtime.Serializer }

func (d watchEventDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	ev, ok := into.(*metav1.WatchEvent)
	if !ok || len(data) == 0 { // the wrapped serializer's error for no data
		return d.Serializer.Decode(data, defaults, into)
	}
	typ, raw, ok := readWatchEvent(data)
	if !ok {
		return d.Serializer.Decode(data, defaults, into)
	}
	*ev = metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: raw}}
	gvk := watchEventKind
	return ev, &gvk, nil
}

// watchEventKind is the kind the wrapped serializer reports for a
// WatchEvent: the first client-go's scheme knows it by (v1, where
// metav1.AddToGroupVersion registers it with the core types).
var watchEventKind = func() schema.GroupVersionKind {
	kinds, _, err := scheme.Scheme.ObjectKinds(&metav1.WatchEvent{})
	if err != nil || len(kinds) == 0 {
		return schema.GroupVersionKind{Version: "v1", Kind: "WatchEvent"}
	}
	return kinds[0]
}()

// readWatchEvent reads a metav1.WatchEvent's protobuf encoding (type = 1,
// object = 2, a RawExtension whose raw = 1), as the generated Unmarshal
// would: the last occurrence of a field wins, unknown fields are skipped.
// ok is false for anything it is not sure of (a bad tag or length, a known
// field of another wire type), which the caller hands to the generated
// code. raw aliases data; it is nil when no object's raw field is
// present, and empty but not nil when one is present and empty, as
// Unmarshal makes it.
func readWatchEvent(data []byte) (typ string, raw []byte, ok bool) {
	for len(data) > 0 {
		num, wt, n := protowire.ConsumeTag(data)
		if n < 0 {
			return "", nil, false
		}
		data = data[n:]
		if (num == 1 || num == 2) && wt != protowire.BytesType {
			return "", nil, false
		}
		m := protowire.ConsumeFieldValue(num, wt, data)
		if m < 0 {
			return "", nil, false
		}
		switch num {
		case 1:
			v, _ := protowire.ConsumeBytes(data)
			typ = eventType(v)
		case 2:
			v, _ := protowire.ConsumeBytes(data)
			// A repeated embedded message merges into the one before:
			// its raw field, a scalar, is replaced only if present.
			r, ok := readRawExtension(v)
			if !ok {
				return "", nil, false
			}
			if r != nil {
				raw = r
			}
		}
		data = data[m:]
	}
	return typ, raw, true
}

// readRawExtension returns the raw field of a RawExtension's encoding
// (nil if absent; the last one if repeated).
func readRawExtension(data []byte) (raw []byte, ok bool) {
	for len(data) > 0 {
		num, wt, n := protowire.ConsumeTag(data)
		if n < 0 {
			return nil, false
		}
		data = data[n:]
		if num == 1 && wt != protowire.BytesType {
			return nil, false
		}
		m := protowire.ConsumeFieldValue(num, wt, data)
		if m < 0 {
			return nil, false
		}
		if num == 1 {
			raw, _ = protowire.ConsumeBytes(data)
			raw = raw[:len(raw):len(raw)] // an append by a reader never writes into data
		}
		data = data[m:]
	}
	return raw, true
}

// eventType is string(v) without an allocation for the types a watch
// sends.
func eventType(v []byte) string {
	switch string(v) {
	case "ADDED":
		return "ADDED"
	case "MODIFIED":
		return "MODIFIED"
	case "DELETED":
		return "DELETED"
	case "BOOKMARK":
		return "BOOKMARK"
	case "ERROR":
		return "ERROR"
	}
	return string(v)
}

// keptPodDecoder decodes v1 Pods and PodLists in Kubernetes' protobuf
// envelope with decodeKeptPod and hands anything else to the wrapped
// serializer. It only decodes; encoding is the wrapped serializer's.
type keptPodDecoder struct{ runtime.Serializer }

// keptPodDecodes counts the pods and pod lists keptPodDecoder decoded
// (tests check that the informers use it).
var keptPodDecodes atomic.Int64

// protobufMagic starts every object in Kubernetes' protobuf encoding.
var protobufMagic = []byte{0x6b, 0x38, 0x73, 0x00}

func (d keptPodDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	apiVersion, kind, raw, ok := envelope(data)
	if !ok || apiVersion != "v1" || (kind != "Pod" && kind != "PodList") {
		return d.Serializer.Decode(data, defaults, into)
	}
	gvk := corev1.SchemeGroupVersion.WithKind(kind)
	keptPodDecodes.Add(1)
	switch kind {
	case "Pod":
		pod, err := decodeKeptPod(raw)
		if err != nil {
			return nil, nil, fmt.Errorf("reflector: decoding a v1 Pod (%d bytes): %w", len(raw), err)
		}
		if p, ok := into.(*corev1.Pod); ok {
			*p = *pod
			pod = p
		}
		pod.SetGroupVersionKind(gvk)
		return pod, &gvk, nil
	default:
		list, ok := into.(*corev1.PodList)
		if !ok {
			list = &corev1.PodList{}
		} else {
			*list = corev1.PodList{}
		}
		if err := decodeKeptPodList(raw, list); err != nil {
			return nil, nil, fmt.Errorf("reflector: decoding a v1 PodList (%d bytes, %d pods read): %w", len(raw), len(list.Items), err)
		}
		list.SetGroupVersionKind(gvk)
		return list, &gvk, nil
	}
}

// envelope reads the runtime.Unknown that Kubernetes' protobuf encoding
// wraps an object in: its apiVersion and kind, and the object's bytes.
// ok is false for anything else, or for an encoded (compressed) object.
func envelope(data []byte) (apiVersion, kind string, raw []byte, ok bool) {
	if !bytes.HasPrefix(data, protobufMagic) {
		return "", "", nil, false
	}
	encoded := false
	err := eachField(data[len(protobufMagic):], func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1: // typeMeta
			return eachField(v, func(num protowire.Number, typ protowire.Type, w []byte, _ uint64) error {
				if typ == protowire.BytesType {
					switch num {
					case 1:
						apiVersion = string(w)
					case 2:
						kind = string(w)
					}
				}
				return nil
			})
		case 2:
			raw = v
		case 3: // contentEncoding
			encoded = len(v) > 0
		}
		return nil
	})
	return apiVersion, kind, raw, err == nil && !encoded
}

// decodeKeptPodList decodes a v1.PodList's bytes: its list metadata and
// each item with decodeKeptPod.
func decodeKeptPodList(data []byte, list *corev1.PodList) error {
	return eachField(data, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			return decodeListMeta(v, &list.ListMeta)
		case 2:
			pod, err := decodeKeptPod(v)
			if err != nil {
				return err
			}
			list.Items = append(list.Items, *pod)
		}
		return nil
	})
}

func decodeListMeta(v []byte, m *metav1.ListMeta) error {
	return eachField(v, func(num protowire.Number, typ protowire.Type, f []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			m.SelfLink = string(f)
		case num == 2 && typ == protowire.BytesType:
			m.ResourceVersion = string(f)
		case num == 3 && typ == protowire.BytesType:
			m.Continue = string(f)
		case num == 4 && typ == protowire.VarintType:
			n := int64(x)
			m.RemainingItemCount = &n
		}
		return nil
	})
}
