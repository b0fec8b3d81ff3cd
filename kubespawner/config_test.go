package kubespawner

import (
	"os"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestLoadKubeSpawnerConfig loads a KubeSpawner-style YAML file with every
// supported option and checks each one arrived.
func TestLoadKubeSpawnerConfig(t *testing.T) {
	data, err := os.ReadFile("testdata/kubespawner-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(data)
	if err != nil {
		t.Fatal(err)
	}
	p := c.Pod
	checks := map[string]bool{
		"slug_scheme":                     c.SlugScheme == "safe",
		"pod_name_template":               c.PodNameTemplate == "jupyter-{user_server}",
		"pvc_name_template":               c.PVCNameTemplate == "claim-{user_server}",
		"secret_name_template":            c.SecretNameTemplate == "{pod_name}-ssl",
		"user_namespace_template":         c.UserNamespaceTemplate == "{hubnamespace}-{username}",
		"dns_name_template":               c.DNSNameTemplate == "{name}.{namespace}.svc.cluster.local",
		"namespace":                       c.Namespace == "jhub",
		"enable_user_namespaces":          c.EnableUserNamespaces,
		"component_label":                 c.ComponentLabel == "singleuser-server",
		"common_labels":                   c.CommonLabels["heritage"] == "jupyterhub",
		"extra_labels":                    c.ExtraLabels["team"] == "{username}",
		"extra_annotations":               c.ExtraAnnotations["owner"] == "{unescaped_username}",
		"cmd":                             reflect.DeepEqual(c.Cmd, []string{"jupyterhub-singleuser", "--debug"}),
		"port":                            c.Port == 8889,
		"environment":                     c.Environment["JUPYTER_ENABLE_LAB"] == "yes",
		"image":                           p.Image == "quay.io/jupyter/scipy-notebook:2024-01-01",
		"image_pull_policy":               p.ImagePullPolicy == corev1.PullIfNotPresent,
		"image_pull_secrets":              reflect.DeepEqual(p.ImagePullSecrets, []string{"regcred", "other"}),
		"node_selector":                   p.NodeSelector["hub.jupyter.org/node-purpose"] == "user",
		"uid":                             p.UID != nil && *p.UID == 1000,
		"gid":                             p.GID != nil && *p.GID == 100,
		"fs_gid":                          p.FSGID != nil && *p.FSGID == 100,
		"supplemental_gids":               reflect.DeepEqual(p.SupplementalGIDs, []int64{100, 101}),
		"privileged":                      !p.Privileged,
		"allow_privilege_escalation":      p.AllowPrivilegeEscalation == 0,
		"container_security_context":      p.ContainerSecurityContext != nil && *p.ContainerSecurityContext.ReadOnlyRootFilesystem,
		"pod_security_context":            p.PodSecurityContext != nil && *p.PodSecurityContext.RunAsNonRoot,
		"working_dir":                     p.WorkingDir == "/home/jovyan",
		"volumes":                         len(p.Volumes) == 1 && p.Volumes[0].PersistentVolumeClaim.ClaimName == "claim-{username}",
		"volume_mounts":                   len(p.VolumeMounts) == 1 && p.VolumeMounts[0].MountPath == "/home/jovyan",
		"cpu_limit":                       p.CPULimit.String() == "2",
		"cpu_guarantee":                   p.CPUGuarantee.String() == "500m",
		"mem_limit":                       p.MemLimit.Value() == 4<<30, // ByteSpecification: 1024-based bytes
		"mem_guarantee":                   p.MemGuarantee.Value() == 1<<30,
		"extra_resource_limits":           p.ExtraResourceLimits.Name("nvidia.com/gpu", "").String() == "1",
		"extra_resource_guarantees":       p.ExtraResourceGuarantees.Name("nvidia.com/gpu", "").String() == "1",
		"lifecycle_hooks":                 p.LifecycleHooks != nil && p.LifecycleHooks.PostStart.Exec.Command[2] == "echo started",
		"init_containers":                 len(p.InitContainers) == 1 && p.InitContainers[0].Name == "init",
		"service_account":                 p.ServiceAccount == "user-sa",
		"automount_service_account_token": p.AutomountServiceAccountToken != nil && !*p.AutomountServiceAccountToken,
		"extra_container_config":          len(p.ExtraContainerConfig) == 1 && p.ExtraContainerConfig[0].Key == "stdin",
		"extra_pod_config":                len(p.ExtraPodConfig) == 1 && p.ExtraPodConfig[0].Key == "dnsPolicy",
		"extra_containers":                len(p.ExtraContainers) == 1 && p.ExtraContainers[0].Name == "sidecar",
		"scheduler_name":                  p.SchedulerName == "user-scheduler",
		"tolerations":                     len(p.Tolerations) == 1 && p.Tolerations[0].Effect == corev1.TaintEffectNoSchedule,
		"node_affinity_preferred":         len(p.NodeAffinityPreferred) == 1,
		"node_affinity_required":          len(p.NodeAffinityRequired) == 1,
		"pod_affinity_preferred":          len(p.PodAffinityPreferred) == 1,
		"pod_affinity_required":           len(p.PodAffinityRequired) == 1,
		"pod_anti_affinity_preferred":     len(p.PodAntiAffinityPreferred) == 1,
		"pod_anti_affinity_required":      len(p.PodAntiAffinityRequired) == 1,
		"priority_class_name":             p.PriorityClassName == "jupyterhub-user",
		"storage_pvc_ensure":              c.StoragePVCEnsure,
		"storage_capacity":                c.StorageCapacity.String() == "10Gi",
		"storage_class":                   c.StorageClass != nil && *c.StorageClass == "standard",
		"storage_access_modes":            reflect.DeepEqual(c.StorageAccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}),
		"storage_extra_labels":            c.StorageExtraLabels["tier"] == "user",
		"storage_extra_annotations":       c.StorageExtraAnnotations["backup"] == "true",
		"storage_selector":                c.StorageSelector != nil && c.StorageSelector.MatchLabels["tier"] == "user",
		"delete_pvc":                      c.DeletePVC != nil && !*c.DeletePVC,
		"remember_pvc_name":               c.RememberPVCName != nil && *c.RememberPVCName,
		"services_enabled":                c.ServicesEnabled,
		"pod_connect_ip":                  c.PodConnectIP == "jupyter-{username}.headless",
		"secret_mount_path":               c.SecretMountPath == "/etc/ssl/jupyter/",
		"start_timeout":                   c.StartTimeout == 600,
		"k8s_api_request_timeout":         c.K8sAPIRequestTimeout == 5,
		"k8s_api_request_retry_timeout":   c.K8sAPIRequestRetryTimeout == 60,
		"delete_grace_period":             c.DeleteGracePeriod != nil && *c.DeleteGracePeriod == 2,
		"delete_stopped_pods":             c.DeleteStoppedPods != nil && !*c.DeleteStoppedPods,
		"events_enabled":                  c.EventsEnabled != nil && *c.EventsEnabled,
		"fatal_reasons":                   reflect.DeepEqual(c.FatalReasons, []string{"ErrImagePull"}),
		"slow_spawn_message_after":        c.SlowSpawnMessageAfter == 45,
		"profile_list":                    len(c.ProfileList) == 1 && c.ProfileList[0].DisplayName == "Default",
	}
	for key, ok := range checks {
		if !ok {
			t.Errorf("option %s not loaded as written", key)
		}
	}
	// Every key of the file is checked above.
	var keys map[string]any
	jsonData, _ := yamlToJSON(data)
	if err := strictJSON(jsonData, &keys); err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		if _, ok := checks[k]; !ok {
			t.Errorf("option %s in the file is not checked", k)
		}
	}
	t.Logf("checked %d options", len(checks))
}
