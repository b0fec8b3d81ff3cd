package manifest

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

// StorageClassAnnotation is the beta storage-class annotation KubeSpawner
// sets next to storageClassName, for clusters that still read it.
const StorageClassAnnotation = "volume.beta.kubernetes.io/storage-class"

// PVCSpec describes a user's claim (KubeSpawner's make_pvc).
type PVCSpec struct {
	Name string // name
	// StorageClass (storage_class): nil leaves the cluster default; a
	// value, even "", is set as storageClassName and the beta annotation.
	StorageClass *string
	AccessModes  []corev1.PersistentVolumeAccessMode // access_modes
	Selector     *metav1.LabelSelector               // selector
	Storage      resource.Quantity                   // storage: the requested size
	Labels       map[string]string                   // labels
	Annotations  map[string]string                   // annotations
}

// PVC builds a user's claim.
func PVC(spec PVCSpec) (*corev1.PersistentVolumeClaim, error) {
	var errs field.ErrorList
	errs = append(errs, validateName(spec.Name, validation.IsDNS1123Subdomain)...)
	if spec.Storage.Sign() <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("storage"), spec.Storage.String(), "must be a positive quantity"))
	}
	// ValidatePersistentVolumeClaimSpec: at least one access mode, each
	// supported, ReadWriteOncePod alone.
	if len(spec.AccessModes) == 0 {
		errs = append(errs, field.Required(field.NewPath("access_modes"), "at least one access mode"))
	}
	if slices.Contains(spec.AccessModes, corev1.ReadWriteOncePod) && len(spec.AccessModes) > 1 {
		errs = append(errs, field.Forbidden(field.NewPath("access_modes"), "may not use ReadWriteOncePod with other access modes"))
	}
	for i, m := range spec.AccessModes {
		switch m {
		case corev1.ReadWriteOnce, corev1.ReadOnlyMany, corev1.ReadWriteMany, corev1.ReadWriteOncePod:
		default:
			errs = append(errs, field.NotSupported(field.NewPath("access_modes").Index(i), m, []corev1.PersistentVolumeAccessMode{
				corev1.ReadWriteOnce, corev1.ReadOnlyMany, corev1.ReadWriteMany, corev1.ReadWriteOncePod}))
		}
	}
	errs = append(errs, validateMeta(spec.Labels, spec.Annotations)...)
	if len(errs) > 0 {
		return nil, &ValidationError{Kind: "PersistentVolumeClaim", Name: spec.Name, Errs: errs}
	}
	pvc := &corev1.PersistentVolumeClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: objectMeta(spec.Name, spec.Labels, spec.Annotations, nil),
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: append([]corev1.PersistentVolumeAccessMode(nil), spec.AccessModes...),
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: spec.Storage.DeepCopy()},
			},
			Selector: spec.Selector.DeepCopy(),
		},
	}
	if spec.StorageClass != nil {
		if pvc.Annotations == nil {
			pvc.Annotations = map[string]string{}
		}
		pvc.Annotations[StorageClassAnnotation] = *spec.StorageClass
		pvc.Spec.StorageClassName = ptr.To(*spec.StorageClass)
	}
	return pvc, nil
}

// Keys of the internal-SSL secret, as the notebook's JUPYTERHUB_SSL_*
// variables expect them.
const (
	SSLKeyKey  = "ssl.key"
	SSLCertKey = "ssl.crt"
	SSLCAKey   = "notebooks-ca_trust.crt"
)

// SecretSpec describes the internal-SSL secret of a user server
// (KubeSpawner's make_secret), from the contents of the files KubeSpawner
// reads.
type SecretSpec struct {
	Name string
	Key  []byte // the server's private key (cert_paths["keyfile"])
	Cert []byte // its certificate (cert_paths["certfile"])
	// CA is the notebooks' CA bundle (cert_paths["cafile"]) and HubCA the
	// hub's (hub_ca); the secret's trust bundle is CA without
	// newlines at either end, a newline, then HubCA.
	CA, HubCA       []byte
	OwnerReferences []metav1.OwnerReference // normally OwnerReference(pod)
	Labels          map[string]string
	Annotations     map[string]string
}

// Secret builds the internal-SSL secret. As KubeSpawner reads the files
// in text mode, "\r\n" and lone "\r" in the contents become "\n".
func Secret(spec SecretSpec) (*corev1.Secret, error) {
	var errs field.ErrorList
	errs = append(errs, validateName(spec.Name, validation.IsDNS1123Subdomain)...)
	for _, f := range []struct {
		name string
		v    []byte
	}{{"key", spec.Key}, {"cert", spec.Cert}} {
		if len(f.v) == 0 {
			errs = append(errs, field.Required(field.NewPath(f.name), "PEM contents"))
		}
	}
	errs = append(errs, validateMeta(spec.Labels, spec.Annotations)...)
	if len(errs) > 0 {
		return nil, &ValidationError{Kind: "Secret", Name: spec.Name, Errs: errs}
	}
	// make_secret: ca_file.read().strip("\n"), newlines off both ends.
	trust := strings.Trim(universalNewlines(spec.CA), "\n") + "\n" + universalNewlines(spec.HubCA)
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: objectMeta(spec.Name, spec.Labels, spec.Annotations, spec.OwnerReferences),
		Data: map[string][]byte{
			SSLKeyKey:  []byte(universalNewlines(spec.Key)),
			SSLCertKey: []byte(universalNewlines(spec.Cert)),
			SSLCAKey:   []byte(trust),
		},
	}, nil
}

// EnvSecretSpec describes the Secret that holds a server's secret
// environment values (its JupyterHub API token), which the pod's env
// references by secretKeyRef instead of carrying them.
type EnvSecretSpec struct {
	Name string
	// Data maps each environment variable's name (the Secret's key) to
	// its value.
	Data            map[string]string
	OwnerReferences []metav1.OwnerReference // normally OwnerReference(pod)
	Labels          map[string]string
	Annotations     map[string]string
}

// EnvSecret builds the environment Secret: type Opaque, one key per
// variable. Its errors name keys, never values.
func EnvSecret(spec EnvSecretSpec) (*corev1.Secret, error) {
	var errs field.ErrorList
	errs = append(errs, validateName(spec.Name, validation.IsDNS1123Subdomain)...)
	if len(spec.Data) == 0 {
		errs = append(errs, field.Required(field.NewPath("data"), "at least one variable"))
	}
	data := make(map[string][]byte, len(spec.Data))
	for k, v := range spec.Data {
		// The API server's rule for Secret keys (ValidateSecret:
		// IsConfigMapKey).
		for _, msg := range validation.IsConfigMapKey(k) {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(k), k, msg))
		}
		data[k] = []byte(v)
	}
	errs = append(errs, validateMeta(spec.Labels, spec.Annotations)...)
	if len(errs) > 0 {
		return nil, &ValidationError{Kind: "Secret", Name: spec.Name, Errs: errs}
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: objectMeta(spec.Name, spec.Labels, spec.Annotations, spec.OwnerReferences),
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}, nil
}

func universalNewlines(b []byte) string {
	s := strings.ReplaceAll(string(b), "\r\n", "\n")
	return strings.ReplaceAll(s, "\r", "\n")
}

// ServiceSpec describes the service in front of a user server's pod
// (KubeSpawner's make_service).
type ServiceSpec struct {
	Name            string
	Port            int32             // the notebook port, 1-65535
	Selector        map[string]string // the pod's labels to select it by
	OwnerReferences []metav1.OwnerReference
	Labels          map[string]string
	Annotations     map[string]string
}

// Service builds a ClusterIP service with one port named "http".
func Service(spec ServiceSpec) (*corev1.Service, error) {
	var errs field.ErrorList
	// Service names are DNS-1035 labels: they become DNS names.
	errs = append(errs, validateName(spec.Name, validation.IsDNS1035Label)...)
	errs = append(errs, validatePort(spec.Port)...)
	if len(spec.Selector) == 0 {
		errs = append(errs, field.Required(field.NewPath("selector"), "a service without a selector would select nothing"))
	}
	errs = append(errs, validateLabels(field.NewPath("selector"), spec.Selector)...)
	errs = append(errs, validateMeta(spec.Labels, spec.Annotations)...)
	if len(errs) > 0 {
		return nil, &ValidationError{Kind: "Service", Name: spec.Name, Errs: errs}
	}
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: objectMeta(spec.Name, spec.Labels, spec.Annotations, spec.OwnerReferences),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Ports:    []corev1.ServicePort{{Name: "http", Port: spec.Port, TargetPort: intstr.FromInt32(spec.Port)}},
			Selector: cloneMap(spec.Selector),
		},
	}, nil
}

// NamespaceSpec describes a user namespace (KubeSpawner's make_namespace).
type NamespaceSpec struct {
	Name        string
	Labels      map[string]string
	Annotations map[string]string
}

// Namespace builds a user namespace.
func Namespace(spec NamespaceSpec) (*corev1.Namespace, error) {
	var errs field.ErrorList
	errs = append(errs, validateName(spec.Name, validation.IsDNS1123Label)...)
	errs = append(errs, validateMeta(spec.Labels, spec.Annotations)...)
	if len(errs) > 0 {
		return nil, &ValidationError{Kind: "Namespace", Name: spec.Name, Errs: errs}
	}
	return &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: objectMeta(spec.Name, spec.Labels, spec.Annotations, nil),
	}, nil
}

// OwnerReference makes a pod the owner of another object (its secret or
// service), so the garbage collector deletes that object with the pod.
// blockOwnerDeletion is true and controller false, as in KubeSpawner.
func OwnerReference(podName string, podUID types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         "v1",
		Kind:               "Pod",
		Name:               podName,
		UID:                podUID,
		BlockOwnerDeletion: ptr.To(true),
		Controller:         ptr.To(false),
	}
}

// objectMeta copies the metadata every builder sets.
func objectMeta(name string, labels, annotations map[string]string, owners []metav1.OwnerReference) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            name,
		Labels:          cloneMap(labels),
		Annotations:     cloneMap(annotations),
		OwnerReferences: cloneOwners(owners),
	}
}

// validateMeta checks the labels and annotations every builder takes.
func validateMeta(labels, annotations map[string]string) field.ErrorList {
	return append(validateLabels(field.NewPath("labels"), labels), validateAnnotations(field.NewPath("annotations"), annotations)...)
}

func cloneOwners(in []metav1.OwnerReference) []metav1.OwnerReference {
	if len(in) == 0 {
		return nil
	}
	out := make([]metav1.OwnerReference, len(in))
	for i := range in {
		out[i] = *in[i].DeepCopy()
	}
	return out
}
