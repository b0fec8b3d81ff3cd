package reflector

import (
	"errors"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// decodeKeptPod decodes the protobuf encoding of a v1.Pod (the bytes
// inside the runtime.Unknown envelope) into a *corev1.Pod that holds only
// the fields the cache contract keeps, skipping the rest on the wire
// (managedFields, the spec beyond container names, ports and the node,
// the status beyond phase, reason, message, IPs, conditions and
// container states). NewPod of the result equals NewPod of the whole
// decoded pod (TestDecodeKeptPodMatchesUnmarshal). Strings are copied
// from data, which the caller may reuse.
func decodeKeptPod(data []byte) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := eachField(data, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch num {
		case 1:
			return decodeMeta(v, &pod.ObjectMeta)
		case 2:
			return decodeSpec(v, &pod.Spec)
		case 3:
			return decodeStatus(v, &pod.Status)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return pod, nil
}

var errBadWire = errors.New("reflector: malformed protobuf")

// eachField calls fn for each length-delimited field of msg (v its
// bytes) and each varint field (x its value), skipping fields of other
// wire types.
func eachField(msg []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return errBadWire
		}
		msg = msg[n:]
		switch typ {
		case protowire.BytesType:
			v, m := protowire.ConsumeBytes(msg)
			if m < 0 {
				return errBadWire
			}
			if err := fn(num, typ, v, 0); err != nil {
				return err
			}
			msg = msg[m:]
		case protowire.VarintType:
			x, m := protowire.ConsumeVarint(msg)
			if m < 0 {
				return errBadWire
			}
			if err := fn(num, typ, nil, x); err != nil {
				return err
			}
			msg = msg[m:]
		default:
			m := protowire.ConsumeFieldValue(num, typ, msg)
			if m < 0 {
				return errBadWire
			}
			msg = msg[m:]
		}
	}
	return nil
}

func decodeTime(v []byte, t *metav1.Time) error {
	if len(v) == 0 {
		t.Time = time.Time{}
		return nil
	}
	var secs int64
	err := eachField(v, func(num protowire.Number, typ protowire.Type, f []byte, x uint64) error {
		if num == 1 && typ == protowire.VarintType {
			secs = int64(x)
		}
		return nil
	})
	// As metav1.Time's Unmarshal: seconds only, local time.
	t.Time = time.Unix(secs, 0).Local()
	return err
}

func decodeMeta(v []byte, m *metav1.ObjectMeta) error {
	return eachField(v, func(num protowire.Number, typ protowire.Type, f []byte, x uint64) error {
		switch {
		case typ != protowire.BytesType:
		case num == 1:
			m.Name = string(f)
		case num == 3:
			m.Namespace = string(f)
		case num == 5:
			m.UID = types.UID(f)
		case num == 6:
			m.ResourceVersion = string(f)
		case num == 8:
			return decodeTime(f, &m.CreationTimestamp)
		case num == 9:
			if m.DeletionTimestamp == nil {
				m.DeletionTimestamp = &metav1.Time{}
			}
			return decodeTime(f, m.DeletionTimestamp)
		case num == 11:
			if m.Labels == nil {
				m.Labels = map[string]string{}
			}
			return decodeMapEntry(f, m.Labels)
		case num == 12:
			if m.Annotations == nil {
				m.Annotations = map[string]string{}
			}
			return decodeMapEntry(f, m.Annotations)
		}
		return nil
	})
}

func decodeMapEntry(v []byte, m map[string]string) error {
	var key, value string
	err := eachField(v, func(num protowire.Number, typ protowire.Type, f []byte, x uint64) error {
		if typ == protowire.BytesType {
			switch num {
			case 1:
				key = string(f)
			case 2:
				value = string(f)
			}
		}
		return nil
	})
	m[key] = value
	return err
}

func decodeSpec(v []byte, s *corev1.PodSpec) error {
	return eachField(v, func(num protowire.Number, typ protowire.Type, f []byte, x uint64) error {
		switch {
		case typ != protowire.BytesType:
		case num == 2:
			var c corev1.Container
			if err := decodeContainer(f, &c); err != nil {
				return err
			}
			s.Containers = append(s.Containers, c)
		case num == 10:
			s.NodeName = string(f)
		}
		return nil
	})
}

func decodeContainer(v []byte, c *corev1.Container) error {
	return eachField(v, func(num protowire.Number, typ protowire.Type, f []byte, x uint64) error {
		switch {
		case typ != protowire.BytesType:
		case num == 1:
			c.Name = string(f)
		case num == 6:
			var p corev1.ContainerPort
			err := eachField(f, func(num protowire.Number, typ protowire.Type, g []byte, x uint64) error {
				switch {
				case num == 1 && typ == protowire.BytesType:
					p.Name = string(g)
				case num == 3 && typ == protowire.VarintType:
					p.ContainerPort = int32(x)
				}
				return nil
			})
			c.Ports = append(c.Ports, p)
			return err
		}
		return nil
	})
}

func decodeStatus(v []byte, s *corev1.PodStatus) error {
	return eachField(v, func(num protowire.Number, typ protowire.Type, f []byte, x uint64) error {
		switch {
		case typ != protowire.BytesType:
		case num == 1:
			s.Phase = corev1.PodPhase(f)
		case num == 2:
			var c corev1.PodCondition
			if err := decodeCondition(f, &c); err != nil {
				return err
			}
			s.Conditions = append(s.Conditions, c)
		case num == 3:
			s.Message = string(f)
		case num == 4:
			s.Reason = string(f)
		case num == 5:
			s.HostIP = string(f)
		case num == 6:
			s.PodIP = string(f)
		case num == 8, num == 10:
			var cs corev1.ContainerStatus
			if err := decodeContainerStatus(f, &cs); err != nil {
				return err
			}
			if num == 8 {
				s.ContainerStatuses = append(s.ContainerStatuses, cs)
			} else {
				s.InitContainerStatuses = append(s.InitContainerStatuses, cs)
			}
		}
		return nil
	})
}

func decodeCondition(v []byte, c *corev1.PodCondition) error {
	return eachField(v, func(num protowire.Number, typ protowire.Type, f []byte, x uint64) error {
		switch {
		case typ != protowire.BytesType:
		case num == 1:
			c.Type = corev1.PodConditionType(f)
		case num == 2:
			c.Status = corev1.ConditionStatus(f)
		case num == 4:
			return decodeTime(f, &c.LastTransitionTime)
		case num == 5:
			c.Reason = string(f)
		case num == 6:
			c.Message = string(f)
		}
		return nil
	})
}

func decodeContainerStatus(v []byte, cs *corev1.ContainerStatus) error {
	return eachField(v, func(num protowire.Number, typ protowire.Type, f []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			cs.Name = string(f)
		case num == 2 && typ == protowire.BytesType:
			return decodeContainerState(f, &cs.State)
		case num == 4 && typ == protowire.VarintType:
			cs.Ready = x != 0
		case num == 5 && typ == protowire.VarintType:
			cs.RestartCount = int32(x)
		}
		return nil
	})
}

func decodeContainerState(v []byte, st *corev1.ContainerState) error {
	return eachField(v, func(num protowire.Number, typ protowire.Type, f []byte, x uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			if st.Waiting == nil {
				st.Waiting = &corev1.ContainerStateWaiting{}
			}
			return decodeStateWaiting(f, st.Waiting)
		case 2:
			if st.Running == nil {
				st.Running = &corev1.ContainerStateRunning{}
			}
			return decodeStateRunning(f, st.Running)
		case 3:
			if st.Terminated == nil {
				st.Terminated = &corev1.ContainerStateTerminated{}
			}
			return decodeStateTerminated(f, st.Terminated)
		}
		return nil
	})
}

func decodeStateWaiting(v []byte, w *corev1.ContainerStateWaiting) error {
	return eachField(v, func(num protowire.Number, typ protowire.Type, g []byte, x uint64) error {
		if typ == protowire.BytesType {
			switch num {
			case 1:
				w.Reason = string(g)
			case 2:
				w.Message = string(g)
			}
		}
		return nil
	})
}

func decodeStateRunning(v []byte, r *corev1.ContainerStateRunning) error {
	return eachField(v, func(num protowire.Number, typ protowire.Type, g []byte, x uint64) error {
		if num == 1 && typ == protowire.BytesType {
			return decodeTime(g, &r.StartedAt)
		}
		return nil
	})
}

func decodeStateTerminated(v []byte, t *corev1.ContainerStateTerminated) error {
	return eachField(v, func(num protowire.Number, typ protowire.Type, g []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			t.ExitCode = int32(x)
		case num == 2 && typ == protowire.VarintType:
			t.Signal = int32(x)
		case num == 3 && typ == protowire.BytesType:
			t.Reason = string(g)
		case num == 4 && typ == protowire.BytesType:
			t.Message = string(g)
		case num == 5 && typ == protowire.BytesType:
			return decodeTime(g, &t.StartedAt)
		case num == 6 && typ == protowire.BytesType:
			return decodeTime(g, &t.FinishedAt)
		}
		return nil
	})
}
