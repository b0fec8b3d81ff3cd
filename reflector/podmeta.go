package reflector

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// GetObjectMeta implements metav1.ObjectMetaAccessor, which is how
// client-go (meta.Accessor) reads a cached pod: its store and indexes key
// it by namespace and name, and its informer compares resource versions.
// The metav1.Object returned reads and writes p itself, allocating
// nothing, except that GetLabels and GetAnnotations return new maps.
// Metadata the cache does not keep (generateName, generation, selfLink,
// deletionGracePeriodSeconds, finalizers, owner references,
// managedFields) reads as empty, and setting it does nothing, as
// metav1.Common documents for unsupported fields; SetAnnotations keeps
// only the annotations a cached Pod keeps. Never set anything on a pod
// from the cache.
func (p *Pod) GetObjectMeta() metav1.Object { return podMeta{p} }

var _ metav1.ObjectMetaAccessor = (*Pod)(nil)

// podMeta is a *Pod seen as a metav1.Object. Being one pointer, it is
// stored in an interface without an allocation.
type podMeta struct{ p *Pod }

var _ metav1.Object = podMeta{}

func (m podMeta) GetNamespace() string                        { return m.p.Namespace }
func (m podMeta) SetNamespace(namespace string)               { m.p.Namespace = namespace }
func (m podMeta) GetName() string                             { return m.p.Name }
func (m podMeta) SetName(name string)                         { m.p.Name = name }
func (m podMeta) GetGenerateName() string                     { return "" }
func (m podMeta) SetGenerateName(string)                      {}
func (m podMeta) GetUID() types.UID                           { return m.p.UID }
func (m podMeta) SetUID(uid types.UID)                        { m.p.UID = uid }
func (m podMeta) GetResourceVersion() string                  { return m.p.ResourceVersion }
func (m podMeta) SetResourceVersion(version string)           { m.p.ResourceVersion = version }
func (m podMeta) GetGeneration() int64                        { return 0 }
func (m podMeta) SetGeneration(int64)                         {}
func (m podMeta) GetSelfLink() string                         { return "" }
func (m podMeta) SetSelfLink(string)                          {}
func (m podMeta) GetCreationTimestamp() metav1.Time           { return m.p.CreationTimestamp }
func (m podMeta) SetCreationTimestamp(t metav1.Time)          { m.p.CreationTimestamp = t }
func (m podMeta) GetDeletionTimestamp() *metav1.Time          { return m.p.DeletionTimestamp }
func (m podMeta) SetDeletionTimestamp(t *metav1.Time)         { m.p.DeletionTimestamp = t }
func (m podMeta) GetDeletionGracePeriodSeconds() *int64       { return nil }
func (m podMeta) SetDeletionGracePeriodSeconds(*int64)        {}
func (m podMeta) GetLabels() map[string]string                { return m.p.Labels.Map() }
func (m podMeta) SetLabels(labels map[string]string)          { m.p.Labels = pairsOf(labels, nil, true) }
func (m podMeta) GetAnnotations() map[string]string           { return m.p.Annotations.Map() }
func (m podMeta) GetFinalizers() []string                     { return nil }
func (m podMeta) SetFinalizers([]string)                      {}
func (m podMeta) GetOwnerReferences() []metav1.OwnerReference { return nil }
func (m podMeta) SetOwnerReferences([]metav1.OwnerReference)  {}
func (m podMeta) GetManagedFields() []metav1.ManagedFieldsEntry {
	return nil
}
func (m podMeta) SetManagedFields([]metav1.ManagedFieldsEntry) {}

func (m podMeta) SetAnnotations(annotations map[string]string) {
	m.p.Annotations = pairsOf(annotations, keptAnnotation, false)
}
