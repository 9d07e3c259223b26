//! The token an operator's metrics ask for, got the way its authors expect a Prometheus to
//! get one: where the profile's `metrics.token` names the ClusterRole that may read them (a
//! kubebuilder v4 scaffold's `metrics-reader`), the harness makes a ServiceAccount of its
//! own in the operator's namespace, binds it to that role (as the scenario's placement
//! names it) and asks the API server for a token (TokenRequest). The recorder's scrapes
//! carry it; controller-runtime's filter checks it with a TokenReview and a
//! SubjectAccessReview, as it would a real Prometheus's.

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

use super::Doing as _;
use super::{StepError, World};

/// The name of the harness's ServiceAccount, and of its ClusterRoleBinding (with the
/// placement's suffix).
pub const METRICS_READER: &str = "opconform-metrics-reader";

/// How long the token is valid: longer than any scenario.
const TOKEN_SECONDS: i64 = 3600;

/// The field manager of what the harness applies here.
const MANAGER: &str = "opconform";

/// A token for the operator's metrics when its profile asks for one, else `None`.
///
/// # Errors
/// When there is no cluster, or the ServiceAccount, its binding or the token cannot be
/// made (the step fails naming which).
pub async fn metrics_token(world: &World) -> Result<Option<String>, StepError> {
    let Some(role) = world.subject().metrics.token_cluster_role.clone() else {
        return Ok(None);
    };
    let placement = world.provider()?.placement();
    let client = world.client()?;
    let namespace = placement.namespace.clone();
    let meta = |name: &str, namespace: Option<&str>| ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        labels: (!placement.labels.is_empty()).then(|| placement.labels.clone()),
        ..ObjectMeta::default()
    };
    let apply = PatchParams::apply(MANAGER).force();
    // The operator's manifests make the namespace too; applying it first (with the same
    // labels, so teardown finds it) lets the ServiceAccount be made before them.
    Api::<Namespace>::all(client.clone())
        .patch(
            &namespace,
            &apply,
            &Patch::Apply(Namespace {
                metadata: meta(&namespace, None),
                ..Namespace::default()
            }),
        )
        .await
        .doing(format!(
            "making namespace {namespace} for the metrics reader"
        ))?;
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), &namespace);
    accounts
        .patch(
            METRICS_READER,
            &apply,
            &Patch::Apply(ServiceAccount {
                metadata: meta(METRICS_READER, Some(&namespace)),
                ..ServiceAccount::default()
            }),
        )
        .await
        .doing(format!(
            "making ServiceAccount {namespace}/{METRICS_READER} to read the operator's metrics"
        ))?;
    let binding = format!("{METRICS_READER}{}", placement.suffix);
    let role = format!("{role}{}", placement.suffix);
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(
            &binding,
            &apply,
            &Patch::Apply(ClusterRoleBinding {
                metadata: meta(&binding, None),
                role_ref: RoleRef {
                    api_group: "rbac.authorization.k8s.io".into(),
                    kind: "ClusterRole".into(),
                    name: role.clone(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: METRICS_READER.into(),
                    namespace: Some(namespace.clone()),
                    ..Subject::default()
                }]),
            }),
        )
        .await
        .doing(format!(
            "binding ServiceAccount {namespace}/{METRICS_READER} to ClusterRole {role} (metrics.token.clusterRole)"
        ))?;
    let token = accounts
        .create_token_request(
            METRICS_READER,
            &PostParams::default(),
            &TokenRequest {
                spec: TokenRequestSpec {
                    audiences: Vec::new(),
                    expiration_seconds: Some(TOKEN_SECONDS),
                    ..TokenRequestSpec::default()
                },
                ..TokenRequest::default()
            },
        )
        .await
        .doing(format!(
            "asking for a token of ServiceAccount {namespace}/{METRICS_READER} (TokenRequest)"
        ))?;
    let token = token
        .status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            StepError::Unmet(format!(
                "the TokenRequest for {namespace}/{METRICS_READER} was answered without a token"
            ))
        })?;
    world.note(&format!(
        "the operator's metrics are read with a token of {namespace}/{METRICS_READER}, bound to ClusterRole {role}"
    ));
    Ok(Some(token))
}
