package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// writeFixtures writes, for each object of fixtureObjects, NAME.pb (the body client-go sends as
// application/vnd.kubernetes.protobuf) and NAME.json (what encoding/json writes for it).
func writeFixtures(dir string) error {
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	serializer := protobuf.NewSerializer(scheme, scheme)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, fixture := range fixtureObjects() {
		var body bytes.Buffer
		if err := serializer.Encode(fixture.object, &body); err != nil {
			return fmt.Errorf("%s: %w", fixture.name, err)
		}
		text, err := json.MarshalIndent(fixture.object, "", "  ")
		if err != nil {
			return fmt.Errorf("%s: %w", fixture.name, err)
		}
		text = append(text, '\n')
		if err := os.WriteFile(filepath.Join(dir, fixture.name+".pb"), body.Bytes(), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, fixture.name+".json"), text, 0o644); err != nil {
			return err
		}
	}
	return nil
}

type fixture struct {
	name   string
	object runtime.Object
}

func ptr[T any](v T) *T { return &v }

var (
	created  = metav1.NewTime(time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC))
	started  = metav1.NewTime(time.Date(2026, 11, 26, 9, 0, 5, 0, time.UTC))
	observed = metav1.NewMicroTime(time.Date(2026, 11, 26, 9, 0, 7, 123456789, time.UTC))
)

func fixtureObjects() []fixture {
	return []fixture{
		{"deployment", deployment()},
		{"pod", pod()},
		{"service", service()},
		{"statefulset", statefulSet()},
		{"cronjob", cronJob()},
		{"secret", secret()},
		{"customresourcedefinition", customResourceDefinition()},
		{"lease", lease()},
		{"event", event()},
		{"controllerrevision", controllerRevision()},
		{"deleteoptions", deleteOptions()},
	}
}

// podSpec is the pod template of the Deployment kubebuilder's tutorial writes for a Memcached,
// with more of the PodSpec filled in.
func podSpec() corev1.PodSpec {
	return corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:       ptr(true),
			SeccompProfile:     &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			FSGroup:            ptr(int64(2000)),
			SupplementalGroups: []int64{3000, 4000},
			Sysctls:            []corev1.Sysctl{{Name: "net.core.somaxconn", Value: "1024"}},
		},
		InitContainers: []corev1.Container{{
			Name:    "init",
			Image:   "busybox:1.36",
			Command: []string{"sh", "-c", "true"},
		}},
		Containers: []corev1.Container{{
			Image:           "memcached:1.6.26-alpine3.19",
			Name:            "memcached",
			ImagePullPolicy: corev1.PullIfNotPresent,
			SecurityContext: &corev1.SecurityContext{
				RunAsNonRoot:             ptr(true),
				RunAsUser:                ptr(int64(1001)),
				AllowPrivilegeEscalation: ptr(false),
				ReadOnlyRootFilesystem:   ptr(false),
				Capabilities: &corev1.Capabilities{
					Drop: []corev1.Capability{"ALL"},
					Add:  []corev1.Capability{"NET_BIND_SERVICE"},
				},
			},
			Ports: []corev1.ContainerPort{
				{ContainerPort: 11211, Name: "memcached"},
				{ContainerPort: 9150, Name: "metrics", Protocol: corev1.ProtocolTCP},
			},
			Command: []string{"memcached", "--memory-limit=64", "-o", "modern", "-v"},
			Env: []corev1.EnvVar{
				{Name: "PLAIN", Value: "value"},
				{Name: "EMPTY"},
				{Name: "FROM_CONFIG_MAP", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "size", Optional: ptr(true),
				}}},
				{Name: "FROM_SECRET", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password",
				}}},
				{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
					APIVersion: "v1", FieldPath: "status.podIP",
				}}},
				{Name: "LIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
					ContainerName: "memcached", Resource: "limits.memory", Divisor: resource.MustParse("1Mi"),
				}}},
			},
			EnvFrom: []corev1.EnvFromSource{{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "settings"},
			}}},
			Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("500m"),
					corev1.ResourceMemory: resource.MustParse("128Mi"),
				},
				Requests: corev1.ResourceList{
					corev1.ResourceCPU:              resource.MustParse("0.1"),
					corev1.ResourceMemory:           resource.MustParse("64Mi"),
					corev1.ResourceEphemeralStorage: resource.MustParse("1G"),
				},
			},
			LivenessProbe: &corev1.Probe{
				ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{
					Port: intstr.FromInt32(11211),
				}},
				InitialDelaySeconds: 5,
				PeriodSeconds:       10,
			},
			ReadinessProbe: &corev1.Probe{
				ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path:        "/healthz",
					Port:        intstr.FromString("metrics"),
					Scheme:      corev1.URISchemeHTTP,
					HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Probe", Value: "1"}},
				}},
				TimeoutSeconds:   1,
				SuccessThreshold: 1,
				FailureThreshold: 3,
			},
			StartupProbe: &corev1.Probe{
				ProbeHandler:                  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
				TerminationGracePeriodSeconds: ptr(int64(0)),
			},
			Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
				Sleep: &corev1.SleepAction{Seconds: 2},
			}},
			VolumeMounts: []corev1.VolumeMount{
				{Name: "config", MountPath: "/etc/memcached", ReadOnly: true},
				{Name: "cache", MountPath: "/cache", SubPath: "data"},
			},
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		}},
		Volumes: []corev1.Volume{
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "settings"},
				Items:                []corev1.KeyToPath{{Key: "size", Path: "size.conf", Mode: ptr(int32(0o400))}},
				DefaultMode:          ptr(int32(0o644)),
			}}},
			{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: "creds", Optional: ptr(false),
			}}},
			{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
				Medium: corev1.StorageMediumMemory, SizeLimit: ptr(resource.MustParse("256Mi")),
			}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
				ClaimName: "data",
			}}},
			{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
						Audience: "vault", ExpirationSeconds: ptr(int64(3600)), Path: "token",
					}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
						Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"},
					}}}},
				},
			}}},
			{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: "/var/log", Type: ptr(corev1.HostPathDirectory),
			}}},
		},
		Tolerations: []corev1.Toleration{
			{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))},
			{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "cache", Effect: corev1.TaintEffectNoSchedule},
		},
		Affinity: &corev1.Affinity{
			NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
						Key: "kubernetes.io/arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64", "arm64"},
					}}}},
				},
			},
			PodAntiAffinity: &corev1.PodAntiAffinity{
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
					Weight: 100,
					PodAffinityTerm: corev1.PodAffinityTerm{
						LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
							Key: "app.kubernetes.io/name", Operator: metav1.LabelSelectorOpIn, Values: []string{"memcached"},
						}}},
						TopologyKey: "kubernetes.io/hostname",
					},
				}},
			},
		},
		TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
			MaxSkew:           1,
			TopologyKey:       "topology.kubernetes.io/zone",
			WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "memcached"}},
			MinDomains:        ptr(int32(2)),
		}},
		NodeSelector:                  map[string]string{"kubernetes.io/os": "linux"},
		ServiceAccountName:            "memcached",
		AutomountServiceAccountToken:  ptr(false),
		TerminationGracePeriodSeconds: ptr(int64(30)),
		DNSPolicy:                     corev1.DNSClusterFirst,
		DNSConfig: &corev1.PodDNSConfig{
			Nameservers: []string{"10.0.0.10"},
			Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr("2")}, {Name: "edns0"}},
		},
		HostAliases:        []corev1.HostAlias{{IP: "127.0.0.1", Hostnames: []string{"cache.local"}}},
		ImagePullSecrets:   []corev1.LocalObjectReference{{Name: "registry"}},
		PriorityClassName:  "high",
		EnableServiceLinks: ptr(false),
	}
}

func deployment() *appsv1.Deployment {
	labels := map[string]string{"app.kubernetes.io/name": "memcached", "app.kubernetes.io/managed-by": "memcached-operator"}
	return &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        "memcached-sample",
			Namespace:   "default",
			Labels:      labels,
			Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         "cache.example.com/v1alpha1",
				Kind:               "Memcached",
				Name:               "memcached-sample",
				UID:                "7c9e6679-7425-40de-944b-e07fc1f90ae7",
				Controller:         ptr(true),
				BlockOwnerDeletion: ptr(true),
			}},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(0)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       podSpec(),
			},
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					MaxUnavailable: ptr(intstr.FromInt32(0)),
					MaxSurge:       ptr(intstr.FromString("25%")),
				},
			},
			RevisionHistoryLimit:    ptr(int32(10)),
			ProgressDeadlineSeconds: ptr(int32(600)),
		},
	}
}

func pod() *corev1.Pod {
	spec := podSpec()
	spec.NodeName = "node-1"
	spec.RestartPolicy = corev1.RestartPolicyAlways
	spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/ready"}}
	spec.Overhead = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("12Mi")}
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:              "memcached-sample-6d4f8b7c9-x2x7q",
			GenerateName:      "memcached-sample-6d4f8b7c9-",
			Namespace:         "default",
			UID:               "0b4e2c4e-6f7a-4f0e-9a43-7f2b3c9d1e5f",
			ResourceVersion:   "4242",
			Generation:        1,
			CreationTimestamp: created,
			Finalizers:        []string{"example.com/cleanup"},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager:    "kube-controller-manager",
				Operation:  metav1.ManagedFieldsOperationUpdate,
				APIVersion: "v1",
				Time:       &created,
				FieldsType: "FieldsV1",
				FieldsV1:   &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:generateName":{}}}`)},
			}},
		},
		Spec: spec,
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: started},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: created, ObservedGeneration: 1},
			},
			HostIP:    "10.0.0.1",
			HostIPs:   []corev1.HostIP{{IP: "10.0.0.1"}},
			PodIP:     "10.244.0.5",
			PodIPs:    []corev1.PodIP{{IP: "10.244.0.5"}, {IP: "fd00::5"}},
			StartTime: &created,
			QOSClass:  corev1.PodQOSBurstable,
			ContainerStatuses: []corev1.ContainerStatus{{
				Name:  "memcached",
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: 137, Signal: 9, Reason: "OOMKilled", StartedAt: created, FinishedAt: started,
				}},
				Ready:              true,
				RestartCount:       1,
				Image:              "memcached:1.6.26-alpine3.19",
				ImageID:            "docker.io/library/memcached@sha256:0123",
				ContainerID:        "containerd://abc",
				Started:            ptr(true),
				AllocatedResources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			}},
		},
	}
}

func service() *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: "memcached", Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app.kubernetes.io/name": "memcached"},
			Ports: []corev1.ServicePort{
				{Name: "memcached", Port: 11211, TargetPort: intstr.FromString("memcached"), Protocol: corev1.ProtocolTCP, NodePort: 30211},
				{Name: "metrics", Port: 8443, TargetPort: intstr.FromInt32(9150), AppProtocol: ptr("https")},
			},
			ClusterIP:                     "10.0.0.20",
			ClusterIPs:                    []string{"10.0.0.20"},
			IPFamilies:                    []corev1.IPFamily{corev1.IPv4Protocol},
			IPFamilyPolicy:                ptr(corev1.IPFamilyPolicySingleStack),
			ExternalTrafficPolicy:         corev1.ServiceExternalTrafficPolicyLocal,
			HealthCheckNodePort:           31000,
			SessionAffinity:               corev1.ServiceAffinityClientIP,
			SessionAffinityConfig:         &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(10800))}},
			PublishNotReadyAddresses:      true,
			AllocateLoadBalancerNodePorts: ptr(false),
			TrafficDistribution:           ptr("PreferClose"),
		},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{
			IP:     "203.0.113.7",
			IPMode: ptr(corev1.LoadBalancerIPModeVIP),
			Ports:  []corev1.PortStatus{{Port: 11211, Protocol: corev1.ProtocolTCP, Error: ptr("none")}},
		}}}},
	}
}

func statefulSet() *appsv1.StatefulSet {
	labels := map[string]string{"app": "db"}
	return &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr(int32(3)),
			Selector:    &metav1.LabelSelector{MatchLabels: labels},
			ServiceName: "db",
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:         "db",
					Image:        "postgres:17",
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/postgresql"}},
				}}},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data", Labels: labels},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: ptr("standard"),
					VolumeMode:       ptr(corev1.PersistentVolumeFilesystem),
					Resources: corev1.VolumeResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
						Limits:   corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")},
					},
				},
			}},
			PodManagementPolicy: appsv1.ParallelPodManagement,
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{
				Type: appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{
					Partition:      ptr(int32(0)),
					MaxUnavailable: ptr(intstr.FromString("50%")),
				},
			},
			MinReadySeconds: 5,
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: appsv1.DeletePersistentVolumeClaimRetentionPolicyType,
				WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			},
			Ordinals: &appsv1.StatefulSetOrdinals{Start: 1},
		},
		Status: appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 2, CurrentRevision: "db-5d8f", CollisionCount: ptr(int32(0))},
	}
}

func cronJob() *batchv1.CronJob {
	return &batchv1.CronJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"},
		ObjectMeta: metav1.ObjectMeta{Name: "backup", Namespace: "default", Labels: map[string]string{"app": "backup"}},
		Spec: batchv1.CronJobSpec{
			Schedule:                   "*/5 * * * *",
			TimeZone:                   ptr("Europe/Paris"),
			StartingDeadlineSeconds:    ptr(int64(120)),
			ConcurrencyPolicy:          batchv1.ForbidConcurrent,
			Suspend:                    ptr(false),
			SuccessfulJobsHistoryLimit: ptr(int32(3)),
			FailedJobsHistoryLimit:     ptr(int32(1)),
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "backup"}},
				Spec: batchv1.JobSpec{
					Parallelism:             ptr(int32(1)),
					Completions:             ptr(int32(1)),
					BackoffLimit:            ptr(int32(4)),
					ActiveDeadlineSeconds:   ptr(int64(600)),
					TTLSecondsAfterFinished: ptr(int32(86400)),
					CompletionMode:          ptr(batchv1.NonIndexedCompletion),
					PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
						{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
							ContainerName: ptr("backup"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{1, 42},
						}},
						{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{
							Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
						}}},
					}},
					Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
						RestartPolicy: corev1.RestartPolicyNever,
						Containers: []corev1.Container{{
							Name:      "backup",
							Image:     "busybox:1.36",
							Args:      []string{"sh", "-c", "date; echo backup"},
							Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
						}},
					}},
				},
			},
		},
		Status: batchv1.CronJobStatus{
			Active:             []corev1.ObjectReference{{Kind: "Job", Namespace: "default", Name: "backup-29000000", APIVersion: "batch/v1"}},
			LastScheduleTime:   &created,
			LastSuccessfulTime: &started,
		},
	}
}

func secret() *corev1.Secret {
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "default"},
		Immutable:  ptr(true),
		Data: map[string][]byte{
			"password": []byte("s3cr3t"),
			"key.bin":  {0x00, 0xff, 0xfe, 0x80, 0x01},
			"empty":    {},
		},
		StringData: map[string]string{"user": "admin"},
		Type:       corev1.SecretTypeOpaque,
	}
}

func customResourceDefinition() *apiextensionsv1.CustomResourceDefinition {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	return &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: "memcacheds.cache.example.com", Annotations: map[string]string{"controller-gen.kubebuilder.io/version": "v0.18.0"}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "cache.example.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "memcacheds", Singular: "memcached", Kind: "Memcached", ListKind: "MemcachedList",
				ShortNames: []string{"mc"}, Categories: []string{"all"},
			},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name:    "v1alpha1",
				Served:  true,
				Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Description: "Memcached is the Schema for the memcacheds API.",
					Type:        "object",
					Required:    []string{"spec"},
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"apiVersion": str,
						"kind":       str,
						"metadata":   {Type: "object"},
						"spec": {
							Type: "object",
							Properties: map[string]apiextensionsv1.JSONSchemaProps{
								"size": {
									Type: "integer", Format: "int32",
									Minimum: ptr(0.0), Maximum: ptr(5.0), ExclusiveMaximum: false,
									Default: &apiextensionsv1.JSON{Raw: []byte(`1`)},
								},
								"ratio":   {Type: "number", MultipleOf: ptr(0.25), Minimum: ptr(-1.5)},
								"mode":    {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"fast"`)}, {Raw: []byte(`"safe"`)}}, Pattern: "^[a-z]+$", MaxLength: ptr(int64(8))},
								"port":    {XIntOrString: true, AnyOf: []apiextensionsv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}}},
								"tags":    {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &str}, XListType: ptr("set"), MinItems: ptr(int64(0))},
								"pair":    {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{JSONSchemas: []apiextensionsv1.JSONSchemaProps{str, {Type: "integer"}}}},
								"labels":  {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &str}},
								"open":    {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true}},
								"closed":  {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: false}},
								"extra":   {Type: "object", XPreserveUnknownFields: ptr(true), XEmbeddedResource: true, Nullable: true},
								"billing": {Type: "object", Dependencies: apiextensionsv1.JSONSchemaDependencies{"card": {Property: []string{"address"}}, "iban": {Schema: &apiextensionsv1.JSONSchemaProps{Required: []string{"bic"}}}}},
								"example": {Type: "object", Example: &apiextensionsv1.JSON{Raw: []byte(`{"a":[1,2.5,null,true]}`)}},
							},
							XValidations: apiextensionsv1.ValidationRules{{
								Rule:              "self.size <= 5",
								MessageExpression: "'size ' + string(self.size) + ' is too big'",
								Reason:            ptr(apiextensionsv1.FieldValueInvalid),
								FieldPath:         ".size",
							}},
						},
						"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"conditions": {Type: "array", XListType: ptr("map"), XListMapKeys: []string{"type"}, Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
								Type: "object", Required: []string{"type", "status"},
							}}},
						}},
					},
				}},
				Subresources: &apiextensionsv1.CustomResourceSubresources{
					Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
					Scale: &apiextensionsv1.CustomResourceSubresourceScale{
						SpecReplicasPath: ".spec.size", StatusReplicasPath: ".status.size", LabelSelectorPath: ptr(".status.selector"),
					},
				},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{{
					Name: "Size", Type: "integer", JSONPath: ".spec.size", Priority: 0,
				}},
				Deprecated:         true,
				DeprecationWarning: ptr("use v1"),
				SelectableFields:   []apiextensionsv1.SelectableField{{JSONPath: ".spec.mode"}},
			}},
			Conversion: &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ClientConfig: &apiextensionsv1.WebhookClientConfig{
						Service:  &apiextensionsv1.ServiceReference{Namespace: "system", Name: "webhook", Path: ptr("/convert"), Port: ptr(int32(443))},
						CABundle: []byte{0x2d, 0x2d, 0x2d, 0xff},
					},
					ConversionReviewVersions: []string{"v1"},
				},
			},
			PreserveUnknownFields: false,
		},
	}
}

func lease() *coordinationv1.Lease {
	return &coordinationv1.Lease{
		TypeMeta:   metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		ObjectMeta: metav1.ObjectMeta{Name: "86f2b6a5.example.com", Namespace: "system"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr("memcached-operator-7d9c_0b4e"),
			LeaseDurationSeconds: ptr(int32(15)),
			AcquireTime:          &observed,
			RenewTime:            &observed,
			LeaseTransitions:     ptr(int32(0)),
		},
	}
}

func event() *eventsv1.Event {
	return &eventsv1.Event{
		TypeMeta:            metav1.TypeMeta{APIVersion: "events.k8s.io/v1", Kind: "Event"},
		ObjectMeta:          metav1.ObjectMeta{Name: "memcached-sample.18a", Namespace: "default"},
		EventTime:           observed,
		Series:              &eventsv1.EventSeries{Count: 2, LastObservedTime: observed},
		ReportingController: "memcached-operator",
		ReportingInstance:   "memcached-operator-7d9c",
		Action:              "Reconcile",
		Reason:              "Created",
		Regarding:           corev1.ObjectReference{Kind: "Memcached", Namespace: "default", Name: "memcached-sample", APIVersion: "cache.example.com/v1alpha1"},
		Note:                "Deployment created",
		Type:                corev1.EventTypeNormal,
	}
}

func controllerRevision() *appsv1.ControllerRevision {
	return &appsv1.ControllerRevision{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ControllerRevision"},
		ObjectMeta: metav1.ObjectMeta{Name: "db-5d8f", Namespace: "default"},
		Data:       runtime.RawExtension{Raw: []byte(`{"spec":{"template":{"metadata":{"labels":{"app":"db"}}}}}`)},
		Revision:   2,
	}
}

func deleteOptions() *metav1.DeleteOptions {
	return &metav1.DeleteOptions{
		TypeMeta:           metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DeleteOptions"},
		GracePeriodSeconds: ptr(int64(0)),
		Preconditions:      &metav1.Preconditions{UID: ptr(types.UID("7c9e6679-7425-40de-944b-e07fc1f90ae7"))},
		PropagationPolicy:  ptr(metav1.DeletePropagationForeground),
		DryRun:             []string{metav1.DryRunAll},
	}
}
