package main

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// addToScheme registers the generally available API groups of Kubernetes 1.34 (each also
// registers meta/v1's option types, DeleteOptions among them, under its own group version), the
// option types under meta.k8s.io/v1, where kube-apiserver accepts them too, with
// PartialObjectMetadata and its list, and aggregated discovery's apidiscovery.k8s.io/v2.
var addToScheme = []func(*runtime.Scheme) error{
	func(scheme *runtime.Scheme) error {
		metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
		// The metadata-only forms of objects and lists that kube-apiserver answers with.
		scheme.AddKnownTypes(metav1.SchemeGroupVersion,
			&metav1.PartialObjectMetadata{}, &metav1.PartialObjectMetadataList{})
		return nil
	},
	admissionregistrationv1.AddToScheme,
	// Aggregated discovery's documents, for the order of their fields.
	apidiscoveryv2.AddToScheme,
	apiextensionsv1.AddToScheme,
	appsv1.AddToScheme,
	authenticationv1.AddToScheme,
	authorizationv1.AddToScheme,
	autoscalingv1.AddToScheme,
	autoscalingv2.AddToScheme,
	batchv1.AddToScheme,
	certificatesv1.AddToScheme,
	coordinationv1.AddToScheme,
	corev1.AddToScheme,
	discoveryv1.AddToScheme,
	eventsv1.AddToScheme,
	flowcontrolv1.AddToScheme,
	networkingv1.AddToScheme,
	nodev1.AddToScheme,
	policyv1.AddToScheme,
	rbacv1.AddToScheme,
	resourcev1.AddToScheme,
	schedulingv1.AddToScheme,
	storagev1.AddToScheme,
}

// newScheme is a scheme holding every kind of addToScheme.
func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, add := range addToScheme {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return scheme, nil
}
