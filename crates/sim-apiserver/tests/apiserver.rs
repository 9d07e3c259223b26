//! The simulated API server as kube-rs sees it: every verb on every resource family, the
//! real error answers, watches and reflectors, CRDs, deletion, server-side apply, RBAC.

use std::collections::BTreeMap;

use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event as CoreEvent, Namespace, Node, Pod, Secret, ServiceAccount,
};
use k8s_openapi::api::events::v1::Event as EventsEvent;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{
    WatchStreamExt as _, reflector, wait::await_condition, wait::conditions, watcher,
};
use serde_json::{Value, json};
use sim_apiserver::ApiServerConfig;
use sim_test_support::{WAIT, api_error, eventually, json, raw, server, server_with};

fn cm(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "demo"}},
        "data": data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
    }))
    .unwrap()
}

#[tokio::test]
async fn configmaps_support_every_verb_with_a_global_resource_version() {
    let (_server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = api
        .create(&PostParams::default(), &cm("a", &[("k", "v")]))
        .await
        .unwrap();
    let rv1: u64 = created
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    api.create(&PostParams::default(), &cm("b", &[]))
        .await
        .unwrap();

    let got = api.get("a").await.unwrap();
    assert_eq!(got.data.as_ref().unwrap()["k"], "v");
    let list = api
        .list(&ListParams::default().labels("app=demo"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 2);
    let list_rv: u64 = list.metadata.resource_version.unwrap().parse().unwrap();
    assert!(list_rv > rv1);

    let mut changed = got.clone();
    changed.data = Some(BTreeMap::from([("k".to_string(), "w".to_string())]));
    let replaced = api
        .replace("a", &PostParams::default(), &changed)
        .await
        .unwrap();
    let rv2: u64 = replaced
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > list_rv);

    let merged = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"m": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(merged.data.as_ref().unwrap()["m"], "1");
    let jsonp: Patch<()> = Patch::Json(
        serde_json::from_value(json!([
            {"op": "add", "path": "/data/j", "value": "2"}
        ]))
        .unwrap(),
    );
    let patched = api
        .patch("a", &PatchParams::default(), &jsonp)
        .await
        .unwrap();
    assert_eq!(patched.data.as_ref().unwrap()["j"], "2");
    let strategic = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Strategic(json!({"data": {"s": "3"}})),
        )
        .await
        .unwrap();
    assert_eq!(strategic.data.as_ref().unwrap().len(), 4);

    // A stale resourceVersion is refused with the real Conflict.
    let (code, reason, message) = api_error(
        api.replace("a", &PostParams::default(), &changed)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert_eq!(
        message,
        "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again"
    );

    api.delete("a", &DeleteParams::default()).await.unwrap();
    let (code, reason, message) = api_error(api.get("a").await.unwrap_err());
    assert_eq!(
        (code, reason.as_str(), message.as_str()),
        (404, "NotFound", "configmaps \"a\" not found")
    );
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("app=demo"),
    )
    .await
    .unwrap();
    assert!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .all(|c| c.metadata.name.as_deref() == Some("kube-root-ca.crt"))
    );
}

#[tokio::test]
async fn creating_a_taken_name_is_already_exists_and_a_bad_name_is_invalid() {
    let (_server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &cm("x", &[]))
        .await
        .unwrap();
    let (code, reason, message) = api_error(
        api.create(&PostParams::default(), &cm("x", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(message, "configmaps \"x\" already exists");
    let (code, reason, message) = api_error(
        api.create(&PostParams::default(), &cm("Bad_Name", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert!(message.starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"), "{message}");
    // A namespace that does not exist.
    let nowhere: Api<ConfigMap> = Api::namespaced(client, "nowhere");
    let (code, _, message) = api_error(
        nowhere
            .create(&PostParams::default(), &cm("x", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (code, message.as_str()),
        (404, "namespaces \"nowhere\" not found")
    );
}

#[tokio::test]
async fn leases_need_a_resource_version_to_be_replaced_and_are_validated() {
    let (_server, client) = server().await;
    let api: Api<Lease> = Api::namespaced(client, "default");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "lock"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "leaseTransitions": 0,
                 "renewTime": "2026-01-01T00:00:00.123456Z"}
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &lease).await.unwrap();
    assert!(created.metadata.generation.is_none());
    let mut unconditional = created.clone();
    unconditional.metadata.resource_version = None;
    let (code, reason, message) = api_error(
        api.replace("lock", &PostParams::default(), &unconditional)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert_eq!(
        message,
        "leases.coordination.k8s.io \"lock\" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update"
    );
    let mut renewed = created.clone();
    renewed.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let renewed = api
        .replace("lock", &PostParams::default(), &renewed)
        .await
        .unwrap();
    assert_eq!(renewed.spec.unwrap().holder_identity.as_deref(), Some("b"));
    let mut zero = created;
    zero.metadata.resource_version = renewed.metadata.resource_version;
    zero.spec.as_mut().unwrap().lease_duration_seconds = Some(0);
    let (code, _, message) = api_error(
        api.replace("lock", &PostParams::default(), &zero)
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert_eq!(
        message,
        "Lease.coordination.k8s.io \"lock\" is invalid: spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"
    );
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "c", "image": "memcached:1.6-alpine"}]}}
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn deployments_have_generation_status_and_scale_subresources() {
    let (_server, client) = server().await;
    let api: Api<Deployment> = Api::namespaced(client, "default");
    let d = api
        .create(&PostParams::default(), &deployment("web", 2))
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    assert_eq!(d.spec.as_ref().unwrap().revision_history_limit, Some(10));
    // Status writes do not touch spec or generation; main writes ignore status.
    let s = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 2}, "spec": {"replicas": 9}})),
        )
        .await
        .unwrap();
    assert_eq!(s.status.as_ref().unwrap().replicas, Some(2));
    assert_eq!(s.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(s.metadata.generation, Some(1));
    let m = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 7}})),
        )
        .await
        .unwrap();
    assert_eq!(m.status.unwrap().replicas, Some(2));
    assert_eq!(m.metadata.generation, Some(1));
    // Scale.
    let scale = api.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(2));
    assert_eq!(scale.status.unwrap().selector.as_deref(), Some("app=web"));
    api.patch_scale(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 5}})),
    )
    .await
    .unwrap();
    let d = api.get("web").await.unwrap();
    assert_eq!(d.spec.unwrap().replicas, Some(5));
    assert_eq!(d.metadata.generation, Some(2));
    // A selector that does not match the template is refused.
    let mut bad = deployment("bad", 1);
    bad.spec.as_mut().unwrap().selector.match_labels =
        Some(BTreeMap::from([("app".into(), "other".into())]));
    let (code, _, message) = api_error(api.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!(code, 422);
    assert!(
        message.contains("`selector` does not match template `labels`"),
        "{message}"
    );
}

#[tokio::test]
async fn scheduled_pods_are_deleted_gracefully_and_unscheduled_ones_at_once() {
    let (_server, client) = server().await;
    let api: Api<Pod> = Api::namespaced(client, "default");
    let pod = |name: &str, node: Option<&str>| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}
        }))
        .unwrap()
    };
    let p = api
        .create(&PostParams::default(), &pod("scheduled", Some("node-1")))
        .await
        .unwrap();
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Pending"));
    assert_eq!(p.spec.unwrap().tolerations.unwrap().len(), 2);
    let deleted = api
        .delete("scheduled", &DeleteParams::default())
        .await
        .unwrap();
    let pending = deleted.left().expect("a graceful delete returns the pod");
    assert_eq!(pending.metadata.deletion_grace_period_seconds, Some(30));
    assert!(pending.metadata.deletion_timestamp.is_some());
    assert!(api.get("scheduled").await.is_ok());
    // The kubelet's final delete: grace 0 with a uid precondition.
    let uid = pending.metadata.uid.clone().unwrap();
    let (code, reason, _) = api_error(
        api.delete(
            "scheduled",
            &DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    uid: Some("other".into()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    api.delete(
        "scheduled",
        &DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(kube::api::Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(api_error(api.get("scheduled").await.unwrap_err()).0, 404);

    api.create(&PostParams::default(), &pod("unscheduled", None))
        .await
        .unwrap();
    api.delete("unscheduled", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(api_error(api.get("unscheduled").await.unwrap_err()).0, 404);
}

#[tokio::test]
async fn finalizers_keep_an_object_until_the_last_one_is_removed() {
    let (_server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut c = cm("held", &[]);
    c.metadata.finalizers = Some(vec!["example.com/a".into(), "example.com/b".into()]);
    api.create(&PostParams::default(), &c).await.unwrap();
    let pending = api
        .delete("held", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert!(pending.metadata.deletion_timestamp.is_some());
    // No new finalizers on a deleting object.
    let (code, _, message) = api_error(
        api.patch("held", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/a", "example.com/b", "example.com/c"]}})))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert!(
        message.contains("no new finalizers can be added if the object is being deleted"),
        "{message}"
    );
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/b"]}})),
    )
    .await
    .unwrap();
    assert!(api.get("held").await.is_ok());
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(api_error(api.get("held").await.unwrap_err()).0, 404);
}

#[tokio::test]
async fn orphan_and_foreground_deletion_add_their_finalizers() {
    let (_server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &cm("o", &[]))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("f", &[]))
        .await
        .unwrap();
    let o = api
        .delete("o", &DeleteParams::orphan())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(o.metadata.finalizers, Some(vec!["orphan".to_string()]));
    let f = api
        .delete("f", &DeleteParams::foreground())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(
        f.metadata.finalizers,
        Some(vec!["foregroundDeletion".to_string()])
    );
}

const CRD: &str = r#"{
  "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "memcacheds.cache.example.com"},
  "spec": {
    "group": "cache.example.com", "scope": "Namespaced",
    "names": {"plural": "memcacheds", "singular": "memcached", "kind": "Memcached", "listKind": "MemcachedList", "shortNames": ["mc"]},
    "versions": [{
      "name": "v1alpha1", "served": true, "storage": true,
      "subresources": {"status": {}},
      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "required": ["size"], "properties": {
          "size": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 100},
          "mode": {"type": "string", "default": "fast"}}},
        "status": {"type": "object", "properties": {"nodes": {"type": "array", "items": {"type": "string"}}}}}}}
    }]
  }
}"#;

async fn install_crd(client: &kube::Client) -> Api<DynamicObject> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_str(CRD).unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let established = await_condition(
        crds,
        "memcacheds.cache.example.com",
        conditions::is_crd_established(),
    );
    tokio::time::timeout(WAIT, established)
        .await
        .expect("established in time")
        .unwrap();
    let gvk = GroupVersionKind::gvk("cache.example.com", "v1alpha1", "Memcached");
    Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk))
}

fn memcached(name: &str, size: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
        "metadata": {"name": name}, "spec": {"size": size, "unknown": "pruned"}
    }))
    .unwrap()
}

#[tokio::test]
async fn a_crd_is_established_and_its_custom_resources_are_pruned_defaulted_and_validated() {
    let (_server, client) = server().await;
    let api = install_crd(&client).await;
    let m = api
        .create(&PostParams::default(), &memcached("m", json!(3)))
        .await
        .unwrap();
    assert_eq!(m.data["spec"], json!({"size": 3, "mode": "fast"}));
    assert_eq!(m.metadata.generation, Some(1));
    let (code, reason, message) = api_error(
        api.create(&PostParams::default(), &memcached("neg", json!(-1)))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert_eq!(
        message,
        "Memcached.cache.example.com \"neg\" is invalid: spec.size: Invalid value: -1: spec.size in body should be greater than or equal to 0"
    );
    let (code, _, message) = api_error(
        api.create(&PostParams::default(), &memcached("three", json!("three")))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert!(message.contains("spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\""), "{message}");
    // Custom resources refuse unconditional updates and strategic merge patches.
    let mut unconditional = m.clone();
    unconditional.metadata.resource_version = None;
    assert_eq!(
        api_error(
            api.replace("m", &PostParams::default(), &unconditional)
                .await
                .unwrap_err()
        )
        .0,
        422
    );
    let (code, reason, _) = api_error(
        api.patch(
            "m",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 4}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (415, "UnsupportedMediaType"));
}

#[tokio::test]
async fn the_status_subresource_of_a_custom_resource_is_isolated_from_the_main_resource() {
    let (_server, client) = server().await;
    let api = install_crd(&client).await;
    api.create(&PostParams::default(), &memcached("m", json!(1)))
        .await
        .unwrap();
    let s = api
        .patch_status("m", &PatchParams::default(), &Patch::Merge(json!({"status": {"nodes": ["a"]}, "spec": {"size": 50}, "metadata": {"labels": {"x": "y"}}})))
        .await
        .unwrap();
    assert_eq!(s.data["status"]["nodes"], json!(["a"]));
    assert_eq!(s.data["spec"]["size"], 1);
    assert!(s.metadata.labels.is_none());
    assert_eq!(s.metadata.generation, Some(1));
    let m = api
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}, "status": {"nodes": []}})),
        )
        .await
        .unwrap();
    assert_eq!(m.data["status"]["nodes"], json!(["a"]));
    assert_eq!(m.metadata.generation, Some(2));
    // Only status changed: generation stays.
    let s2 = api
        .patch_status(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"nodes": ["a", "b"]}})),
        )
        .await
        .unwrap();
    assert_eq!(s2.metadata.generation, Some(2));
}

#[tokio::test]
async fn server_side_apply_tracks_owners_reports_conflicts_and_forces() {
    let (_server, client) = server().await;
    let api: Api<Deployment> = Api::namespaced(client, "default");
    let applied = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "memcached:1.6-alpine"}]}}}
    });
    let d = api
        .patch("web", &PatchParams::apply("alice"), &Patch::Apply(&applied))
        .await
        .unwrap();
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(2));
    assert!(
        d.metadata
            .managed_fields
            .unwrap()
            .iter()
            .any(|m| m.manager.as_deref() == Some("alice")
                && m.operation.as_deref() == Some("Apply"))
    );
    let mut bob = applied.clone();
    bob["spec"]["replicas"] = json!(3);
    let (code, reason, message) = api_error(
        api.patch("web", &PatchParams::apply("bob"), &Patch::Apply(&bob))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert_eq!(
        message,
        "Apply failed with 1 conflict: conflict with \"alice\": .spec.replicas"
    );
    let forced = api
        .patch(
            "web",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(&bob),
        )
        .await
        .unwrap();
    assert_eq!(forced.spec.unwrap().replicas, Some(3));
    // Alice's unchanged re-apply now conflicts with bob, who owns replicas.
    assert_eq!(
        api_error(
            api.patch("web", &PatchParams::apply("alice"), &Patch::Apply(&applied))
                .await
                .unwrap_err()
        )
        .0,
        409
    );
}

#[tokio::test]
async fn the_other_resource_families_serve_create_get_list_and_delete() {
    let (server, client) = server().await;
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns = nss
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Active"));
    // The namespace got its default ServiceAccount and root CA.
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "team");
    eventually("the default serviceaccount", || {
        let sas = sas.clone();
        async move { sas.get_opt("default").await.unwrap() }
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    assert!(
        cms.get("kube-root-ca.crt").await.unwrap().data.unwrap()["ca.crt"]
            .contains("BEGIN CERTIFICATE")
    );

    let secrets: Api<Secret> = Api::namespaced(client.clone(), "team");
    let s = secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(s.data.unwrap()["k"].0, b"v");
    assert_eq!(s.type_.as_deref(), Some("Opaque"));

    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "node-1"}})).unwrap(),
        )
        .await
        .unwrap();
    nodes
        .patch_status(
            "node-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})),
        )
        .await
        .unwrap();
    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    // Core events and events.k8s.io events are the same objects.
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "team");
    core.create(&PostParams::default(), &serde_json::from_value(json!({
        "metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "team"},
        "reason": "Started", "message": "hello", "type": "Normal"})).unwrap()).await.unwrap();
    let events: Api<EventsEvent> = Api::namespaced(client.clone(), "team");
    let e = events.get("e1").await.unwrap();
    assert_eq!(e.note.as_deref(), Some("hello"));
    assert_eq!(e.regarding.unwrap().name.as_deref(), Some("p"));
    let by_reason = core
        .list(&ListParams::default().fields("reason=Started"))
        .await
        .unwrap();
    assert_eq!(by_reason.items.len(), 1);

    let roles: Api<Role> = Api::namespaced(client.clone(), "team");
    roles.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "r"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]})).unwrap()).await.unwrap();
    let rbs: Api<RoleBinding> = Api::namespaced(client.clone(), "team");
    rbs.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "rb"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"}, "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "team"}]})).unwrap()).await.unwrap();
    let crs: Api<ClusterRole> = Api::all(client.clone());
    assert!(crs.get("cluster-admin").await.is_ok());
    let crbs: Api<ClusterRoleBinding> = Api::all(client.clone());
    assert!(crbs.list(&ListParams::default()).await.unwrap().items.len() >= 4);

    // The ServiceAccount can now get pods in its namespace, and nothing more.
    let sa_client = server
        .service_account_client("team", "default")
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(sa_client.clone(), "team");
    assert_eq!(api_error(pods.get("missing").await.unwrap_err()).0, 404);
    let (code, reason, message) = api_error(pods.list(&ListParams::default()).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        message,
        "pods is forbidden: User \"system:serviceaccount:team:default\" cannot list resource \"pods\" in API group \"\" in the namespace \"team\""
    );
    let leases: Api<Lease> = Api::namespaced(sa_client, "team");
    let (code, _, message) = api_error(leases.get("l").await.unwrap_err());
    assert_eq!(code, 403);
    assert_eq!(
        message,
        "leases.coordination.k8s.io \"l\" is forbidden: User \"system:serviceaccount:team:default\" cannot get resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"team\""
    );

    nss.delete("team", &DeleteParams::default()).await.unwrap();
    let terminating = nss.get("team").await.unwrap();
    assert_eq!(
        terminating.status.unwrap().phase.as_deref(),
        Some("Terminating")
    );
    let (code, reason, message) = api_error(
        cms.create(&PostParams::default(), &cm("late", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));
    assert!(
        message.ends_with(
            "unable to create new content in namespace team because it is being terminated"
        ),
        "{message}"
    );
}

#[tokio::test]
async fn a_request_without_a_valid_token_is_unauthorized() {
    let (server, _client) = server().await;
    let bad = sim_apiserver::ApiServer::client_for(&server.kubeconfig_for(
        &server.url(),
        "nobody",
        "not-a-token",
    ))
    .await
    .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(bad, "default");
    let (code, reason, _) = api_error(api.list(&ListParams::default()).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (401, "Unauthorized"));
}

#[tokio::test]
async fn self_subject_access_reviews_answer_for_the_impersonated_user() {
    let (_server, client) = server().await;
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client);
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some("delete".into()),
                resource: Some("nodes".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = reviews
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    assert!(answer.status.unwrap().allowed);
}

#[tokio::test]
async fn a_reflector_stays_consistent_through_updates_deletes_and_a_relist_after_expiry() {
    let (server, client) = server_with(ApiServerConfig {
        watch_history: 50,
        ..Default::default()
    })
    .await;
    let nss: Api<Namespace> = Api::all(client.clone());
    for ns in ["a", "b"] {
        nss.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
    }
    let api_a: Api<ConfigMap> = Api::namespaced(client.clone(), "a");
    let api_b: Api<ConfigMap> = Api::namespaced(client.clone(), "b");
    let (reader, writer) = reflector::store::<ConfigMap>();
    let stream = reflector::reflector(
        writer,
        watcher(api_a.clone(), watcher::Config::default().timeout(1)),
    )
    .applied_objects()
    .boxed();
    // Errors (the in-stream 410 among them) are reported and the watcher carries on.
    let task = tokio::spawn(stream.for_each(|_| futures::future::ready(())));
    let names = |reader: &reflector::Store<ConfigMap>| {
        let mut n: Vec<String> = reader
            .state()
            .iter()
            .map(|c| c.metadata.name.clone().unwrap())
            .collect();
        n.sort();
        n
    };
    for i in 0..3 {
        api_a
            .create(&PostParams::default(), &cm(&format!("c{i}"), &[]))
            .await
            .unwrap();
    }
    eventually("three objects in the reflector", || {
        let r = reader.clone();
        async move { (names(&r).len() == 4).then_some(()) }
    })
    .await;
    api_a.delete("c0", &DeleteParams::default()).await.unwrap();
    api_a
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "1"}})),
        )
        .await
        .unwrap();
    eventually("the delete and update", || {
        let r = reader.clone();
        async move {
            let ok = !names(&r).contains(&"c0".to_string())
                && r.state().iter().any(|c| {
                    c.metadata.name.as_deref() == Some("c1")
                        && c.data.as_ref().is_some_and(|d| d.contains_key("v"))
                });
            ok.then_some(())
        }
    })
    .await;
    // Writes elsewhere move the history past what this watch has seen; compaction then
    // makes its next watch (after its 1 s timeout) expire, and it must relist.
    let lists_before = server
        .state()
        .audit
        .events()
        .iter()
        .filter(|e| e.verb == "list" && e.namespace == "a")
        .count();
    for i in 0..60 {
        api_b
            .create(&PostParams::default(), &cm(&format!("x{i}"), &[]))
            .await
            .unwrap();
    }
    server.state().store.compact();
    eventually("a relist after the in-stream 410", || {
        let audit = server.state().audit.events();
        async move {
            (audit
                .iter()
                .filter(|e| e.verb == "list" && e.namespace == "a")
                .count()
                > lists_before)
                .then_some(())
        }
    })
    .await;
    api_a
        .create(&PostParams::default(), &cm("after", &[]))
        .await
        .unwrap();
    eventually(
        "the reflector to hold the object written after expiry",
        || {
            let r = reader.clone();
            async move { names(&r).contains(&"after".to_string()).then_some(()) }
        },
    )
    .await;
    assert_eq!(
        names(&reader),
        vec!["after", "c1", "c2", "kube-root-ca.crt"]
    );
    task.abort();
}

#[tokio::test]
async fn a_watch_from_a_resource_version_sees_only_later_events_with_the_right_types() {
    let (_server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let first = api
        .create(&PostParams::default(), &cm("w", &[]))
        .await
        .unwrap();
    let rv = first.metadata.resource_version.clone().unwrap();
    let mut stream = api
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"a": "b"}})),
    )
    .await
    .unwrap();
    api.delete("w", &DeleteParams::default()).await.unwrap();
    let Some(Ok(WatchEvent::Modified(m))) = stream.next().await else {
        panic!("expected MODIFIED")
    };
    assert_eq!(m.data.unwrap()["a"], "b");
    let Some(Ok(WatchEvent::Deleted(d))) = stream.next().await else {
        panic!("expected DELETED")
    };
    let delete_rv: u64 = d.metadata.resource_version.unwrap().parse().unwrap();
    assert!(delete_rv > m.metadata.resource_version.unwrap().parse().unwrap());
}

#[tokio::test]
async fn a_label_selector_watch_reports_objects_entering_and_leaving_the_selection() {
    let (_server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut stream = api
        .watch(&WatchParams::default().labels("tier=cache").timeout(5), "0")
        .await
        .unwrap()
        .boxed();
    let mut c = cm("sel", &[]);
    c.metadata.labels = Some(BTreeMap::from([("tier".into(), "web".into())]));
    api.create(&PostParams::default(), &c).await.unwrap();
    api.patch(
        "sel",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"tier": "cache"}}})),
    )
    .await
    .unwrap();
    api.patch(
        "sel",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"tier": "db"}}})),
    )
    .await
    .unwrap();
    let Some(Ok(WatchEvent::Added(a))) = stream.next().await else {
        panic!("expected ADDED on entering")
    };
    assert_eq!(a.metadata.labels.unwrap()["tier"], "cache");
    let Some(Ok(WatchEvent::Deleted(d))) = stream.next().await else {
        panic!("expected DELETED on leaving")
    };
    assert_eq!(d.metadata.labels.unwrap()["tier"], "cache");
}

#[tokio::test]
async fn a_watch_from_an_expired_version_gets_an_in_stream_410_and_bookmarks_carry_type_meta() {
    let (_server, client) = server_with(ApiServerConfig {
        watch_history: 5,
        bookmark_interval: std::time::Duration::from_millis(100),
        ..Default::default()
    })
    .await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..10 {
        api.create(&PostParams::default(), &cm(&format!("e{i}"), &[]))
            .await
            .unwrap();
    }
    let (code, body) = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=2",
        "",
        vec![],
    )
    .await;
    assert_eq!(code, 200);
    let line = json(body.lines().next().unwrap());
    assert_eq!(line["type"], "ERROR");
    assert_eq!(line["object"]["code"], 410);
    assert_eq!(line["object"]["reason"], "Expired");
    assert_eq!(body.lines().count(), 1);

    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let (_, body) = raw(&client, "GET", &format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=1"), "", vec![]).await;
    let bookmark = body
        .lines()
        .map(json)
        .find(|e| e["type"] == "BOOKMARK")
        .expect("a bookmark within 1s");
    assert_eq!(bookmark["object"]["kind"], "ConfigMap");
    assert_eq!(bookmark["object"]["apiVersion"], "v1");
    assert!(bookmark["object"]["metadata"]["resourceVersion"].is_string());

    let (_, body) = raw(&client, "GET", "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1", "", vec![]).await;
    let events: Vec<Value> = body.lines().map(json).collect();
    let end = events
        .iter()
        .position(|e| e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true")
        .expect("initial-events-end bookmark");
    assert_eq!(
        end, 11,
        "10 objects + the root CA configmap, then the bookmark"
    );
}

#[tokio::test]
async fn list_paging_returns_every_object_once_with_continue_tokens() {
    let (_server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    for i in 0..7 {
        api.create(&PostParams::default(), &cm(&format!("p{i}"), &[]))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut params = ListParams::default().limit(3);
    loop {
        let page = api.list(&params).await.unwrap();
        assert!(page.metadata.resource_version.is_some());
        seen.extend(page.items.into_iter().map(|c| c.metadata.name.unwrap()));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    assert_eq!(seen.len(), 8);
    let mut unique = seen.clone();
    unique.dedup();
    assert_eq!(unique, seen);
}

#[tokio::test]
async fn bad_input_gets_the_right_status_and_the_server_keeps_serving() {
    let (_server, client) = server().await;
    let path = "/api/v1/namespaces/default/configmaps";
    let (code, body) = raw(
        &client,
        "POST",
        path,
        "application/json",
        b"{not json".to_vec(),
    )
    .await;
    assert_eq!(
        (code, json(&body)["reason"].clone()),
        (400, json!("BadRequest"))
    );
    let (code, body) = raw(&client, "POST", path, "text/plain", b"hello".to_vec()).await;
    assert_eq!(
        (code, json(&body)["reason"].clone()),
        (415, json!("UnsupportedMediaType"))
    );
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{path}/x"),
        "application/x-unknown",
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(
        (code, json(&body)["reason"].clone()),
        (415, json!("UnsupportedMediaType"))
    );
    let (code, body) = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/widgets",
        "",
        vec![],
    )
    .await;
    assert_eq!(
        (code, json(&body)["reason"].clone()),
        (404, json!("NotFound"))
    );
    let (code, body) = raw(
        &client,
        "POST",
        path,
        "application/json",
        serde_json::to_vec(&json!({"metadata": {"name": "UPPER"}})).unwrap(),
    )
    .await;
    assert_eq!(
        (code, json(&body)["details"]["causes"][0]["field"].clone()),
        (422, json!("metadata.name"))
    );
    let big = json!({"metadata": {"name": "big"}, "data": {"x": "a".repeat(4 * 1024 * 1024)}});
    let (code, body) = raw(
        &client,
        "POST",
        path,
        "application/json",
        serde_json::to_vec(&big).unwrap(),
    )
    .await;
    assert_eq!(
        (code, json(&body)["reason"].clone()),
        (413, json!("RequestEntityTooLarge"))
    );
    let (code, body) = raw(
        &client,
        "GET",
        &format!("{path}?watch=true&resourceVersion=abc"),
        "",
        vec![],
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(json(&body)["reason"], "Invalid");
    let (code, body) = raw(
        &client,
        "GET",
        &format!("{path}?labelSelector=a%20in%20(b"),
        "",
        vec![],
    )
    .await;
    assert_eq!(code, 400, "{body}");
    // Still serving.
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    assert!(
        api.create(&PostParams::default(), &cm("fine", &[]))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn the_audit_attributes_every_request_to_its_user_with_verb_resource_and_code() {
    let (server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &cm("audited", &[]))
        .await
        .unwrap();
    let _ = api.get("missing").await;
    let events = server.state().audit.events();
    let create = events
        .iter()
        .find(|e| e.verb == "create" && e.name == "audited" && e.resource == "configmaps")
        .expect("create audited");
    assert_eq!(
        (create.user.as_str(), create.code, create.namespace.as_str()),
        ("opconform-admin", 201, "default")
    );
    assert!(create.is_write());
    let get = events
        .iter()
        .find(|e| e.verb == "get" && e.name == "missing")
        .expect("get audited");
    assert_eq!(get.code, 404);
    assert_eq!(get.source_ip, "127.0.0.1");
}

#[tokio::test]
async fn a_reject_rule_answers_matching_requests_with_the_chosen_status_until_allowed() {
    use sim_apiserver::faults::RequestMatch;
    let (server, client) = server().await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let rule = server
        .state()
        .faults
        .reject(
            RequestMatch {
                verbs: vec!["create".into()],
                resource: Some("deployments".into()),
                ..Default::default()
            },
            500,
            "InternalError",
            "injected: deployments cannot be created",
        )
        .unwrap();
    let (code, reason, message) = api_error(
        api.create(&PostParams::default(), &deployment("web", 1))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (code, reason.as_str(), message.as_str()),
        (
            500,
            "InternalError",
            "injected: deployments cannot be created"
        )
    );
    // Other verbs and resources pass.
    assert!(api.list(&ListParams::default()).await.is_ok());
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    assert!(
        cms.create(&PostParams::default(), &cm("ok", &[]))
            .await
            .is_ok()
    );
    server.state().faults.allow(rule).unwrap();
    assert!(
        api.create(&PostParams::default(), &deployment("web", 1))
            .await
            .is_ok()
    );
    let log: Vec<String> = server
        .state()
        .faults
        .log()
        .into_iter()
        .map(|e| e.verb)
        .collect();
    assert_eq!(log, vec!["reject", "allow"]);
    let rejected = server
        .state()
        .audit
        .events()
        .into_iter()
        .filter(|e| e.resource == "deployments" && e.verb == "create")
        .map(|e| e.code)
        .collect::<Vec<_>>();
    assert_eq!(rejected, vec![500, 201]);
}

#[tokio::test]
async fn a_lose_rule_commits_a_write_its_client_gave_up_on_so_the_next_write_from_what_it_knew_conflicts()
 {
    use sim_apiserver::faults::{Milestone, RequestMatch};
    let (server, client) = server().await;
    let api: Api<Lease> = Api::namespaced(client, "default");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "lock"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "leaseTransitions": 0,
                 "renewTime": "2026-01-01T00:00:00.000000Z"}
    }))
    .unwrap();
    let known = api.create(&PostParams::default(), &lease).await.unwrap();
    let lease_requests = |verb: &str| RequestMatch {
        verbs: vec![verb.into()],
        group: Some("coordination.k8s.io".into()),
        resource: Some("leases".into()),
        name: Some("lock".into()),
        ..Default::default()
    };
    let faults = &server.state().faults;
    faults.lose_answer(
        lease_requests("update"),
        Some((lease_requests("get"), Milestone::Answered)),
        std::time::Duration::from_secs(30),
    );
    // The renewal: held until the lease is read, and given up by its client before that.
    let mut renewal = known.clone();
    renewal.spec.as_mut().unwrap().renew_time =
        Some(serde_json::from_value(json!("2026-01-01T00:00:02.000000Z")).unwrap());
    let gave_up = tokio::time::timeout(
        std::time::Duration::from_millis(300),
        api.replace("lock", &PostParams::default(), &renewal),
    )
    .await;
    assert!(gave_up.is_err(), "the renewal was answered: {gave_up:?}");
    // The read is answered with the lease as it was; then the renewal commits.
    let read = api.get("lock").await.unwrap();
    assert_eq!(
        read.metadata.resource_version,
        known.metadata.resource_version
    );
    let committed = eventually("the given-up renewal to be committed", || async {
        let now = api.get("lock").await.unwrap();
        (now.metadata.resource_version != known.metadata.resource_version).then_some(now)
    })
    .await;
    assert_eq!(
        committed.spec.unwrap().renew_time,
        renewal.spec.as_ref().unwrap().renew_time
    );
    // The release its client writes from what it read conflicts (kubernetes #131867).
    let mut release = read.clone();
    release.spec.as_mut().unwrap().holder_identity = None;
    let (code, reason, _) = api_error(
        api.replace("lock", &PostParams::default(), &release)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    let log: Vec<(String, String)> = faults
        .log()
        .into_iter()
        .map(|e| (e.verb, e.detail))
        .collect();
    let verbs: Vec<&str> = log.iter().map(|(v, _)| v.as_str()).collect();
    assert_eq!(verbs, ["arm", "defer", "serve", "lose"]);
    assert!(
        log[3].1.ends_with("served (200), its answer dropped"),
        "{}",
        log[3].1
    );
    let updates: Vec<u16> = server
        .state()
        .audit
        .events()
        .into_iter()
        .filter(|e| e.resource == "leases" && e.verb == "update")
        .map(|e| e.code)
        .collect();
    assert_eq!(updates, [200, 409]);

    // A client that waits gets no answer: its connection is closed; the write is committed.
    let before = api.get("lock").await.unwrap();
    faults.lose_answer(lease_requests("update"), None, std::time::Duration::ZERO);
    let mut again = before.clone();
    again.spec.as_mut().unwrap().lease_transitions = Some(1);
    let error = api
        .replace("lock", &PostParams::default(), &again)
        .await
        .unwrap_err();
    assert!(!matches!(error, kube::Error::Api(_)), "{error:?}");
    let after = api.get("lock").await.unwrap();
    assert_eq!(after.spec.as_ref().unwrap().lease_transitions, Some(1));

    // A write only deferred is dropped with its client; one held and then committed lands
    // although its client gave up on it.
    let hold = std::time::Duration::from_millis(400);
    let from = faults.log().len();
    for (committed, transitions) in [(false, 2), (true, 3)] {
        if committed {
            faults.commit_after(lease_requests("update"), hold);
        } else {
            faults.defer_for(lease_requests("update"), hold);
        }
        let mut write = api.get("lock").await.unwrap();
        write.spec.as_mut().unwrap().lease_transitions = Some(transitions);
        let gave_up = tokio::time::timeout(
            std::time::Duration::from_millis(100),
            api.replace("lock", &PostParams::default(), &write),
        )
        .await;
        assert!(gave_up.is_err());
    }
    // The committed write was held after the other was given up: once it was served, the
    // other would have been too.
    let serves = || {
        faults.log()[from..]
            .iter()
            .filter(|e| e.verb == "serve")
            .count()
    };
    eventually("the committed write's hold to end", || async {
        (serves() > 0).then_some(())
    })
    .await;
    let landed = api
        .get("lock")
        .await
        .unwrap()
        .spec
        .unwrap()
        .lease_transitions;
    assert_eq!((serves(), landed), (1, Some(3)));
}

#[tokio::test]
async fn a_delay_rule_adds_at_least_the_delay() {
    use sim_apiserver::faults::RequestMatch;
    let (server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    server.state().faults.delay(
        RequestMatch {
            verbs: vec!["get".into()],
            resource: Some("configmaps".into()),
            ..Default::default()
        },
        std::time::Duration::from_millis(300),
    );
    let start = std::time::Instant::now();
    let _ = api.get("kube-root-ca.crt").await.unwrap();
    assert!(start.elapsed() >= std::time::Duration::from_millis(300));
}

#[tokio::test]
async fn a_built_in_status_write_keeps_metadata_changes_but_not_spec_changes() {
    let (_server, client) = server().await;
    let api: Api<Deployment> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &deployment("rev", 1))
        .await
        .unwrap();
    let d = api
        .patch_status(
            "rev",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"annotations": {"deployment.kubernetes.io/revision": "1"}, "labels": {"x": "y"}},
                "spec": {"replicas": 5},
                "status": {"observedGeneration": 1}
            })),
        )
        .await
        .unwrap();
    assert_eq!(
        d.metadata.annotations.unwrap()["deployment.kubernetes.io/revision"],
        "1"
    );
    assert!(
        d.metadata.labels.is_none(),
        "deployments/status resets labels"
    );
    assert_eq!(d.spec.unwrap().replicas, Some(1));
    assert_eq!(
        d.metadata.generation,
        Some(1),
        "status writes never bump generation"
    );
}

#[tokio::test]
async fn the_audit_names_the_object_a_create_made() {
    let (server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &cm("named", &[]))
        .await
        .unwrap();
    let events = server.state().audit.events();
    assert!(
        events
            .iter()
            .any(|e| e.verb == "create" && e.resource == "configmaps" && e.name == "named")
    );
}

#[tokio::test]
async fn a_dry_run_validates_and_answers_but_stores_nothing() {
    let (server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let revision = server.state().store.revision();
    let would_be = api.create(&dry, &cm("dry", &[("k", "v")])).await.unwrap();
    assert_eq!(would_be.data.unwrap()["k"], "v");
    assert!(would_be.metadata.uid.is_some());
    assert_eq!(api_error(api.get("dry").await.unwrap_err()).0, 404);
    // Validation still runs.
    assert_eq!(
        api_error(api.create(&dry, &cm("Bad_Name", &[])).await.unwrap_err()).0,
        422
    );
    let real = api
        .create(&PostParams::default(), &cm("real", &[]))
        .await
        .unwrap();
    let patched = api
        .patch(
            "real",
            &PatchParams {
                dry_run: true,
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"data": {"x": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data.unwrap()["x"], "1");
    assert_eq!(
        patched.metadata.resource_version,
        real.metadata.resource_version
    );
    assert!(
        !api.get("real")
            .await
            .unwrap()
            .data
            .unwrap_or_default()
            .contains_key("x"),
        "the dry-run patch was not stored"
    );
    api.delete(
        "real",
        &DeleteParams {
            dry_run: true,
            ..DeleteParams::default()
        },
    )
    .await
    .unwrap();
    assert!(api.get("real").await.is_ok());
    // Only the real create moved the revision.
    assert_eq!(server.state().store.revision(), revision + 1);
    let (code, body) = raw(
        &client,
        "POST",
        "/api/v1/namespaces/default/configmaps?dryRun=Some",
        "application/json",
        serde_json::to_vec(&json!({"metadata": {"name": "x"}})).unwrap(),
    )
    .await;
    assert_eq!(code, 400, "{body}");
}

#[tokio::test]
async fn namespaces_cannot_be_deleted_as_a_collection_as_on_kube_apiserver() {
    let (_server, client) = server().await;
    let namespaces: Api<Namespace> = Api::all(client);
    let (code, reason, _) = api_error(
        namespaces
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (405, "MethodNotAllowed"));
    assert!(namespaces.get("default").await.is_ok());
}

#[tokio::test]
async fn pods_log_streams_what_the_kubelet_source_writes_until_it_ends() {
    use futures::AsyncBufReadExt as _;
    use sim_apiserver::podlog::{LogRequest, LogStream};
    let (server, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    for (name, node) in [("placed", json!("worker")), ("unplaced", json!(null))] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "busybox"}]},
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let (later, written) = tokio::sync::mpsc::unbounded_channel::<bytes::Bytes>();
    let written = std::sync::Mutex::new(Some(written));
    server
        .state()
        .add_log_source(std::sync::Arc::new(move |request: &LogRequest<'_>| {
            if request.pod != "placed" {
                return None;
            }
            if request.options.previous {
                return Some(Err("no previous instance here".into()));
            }
            let rest = written
                .lock()
                .unwrap()
                .take()
                .filter(|_| request.options.follow)
                .map(|rx| {
                    Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
                        as sim_apiserver::podlog::LogTail
                });
            Some(Ok(LogStream {
                head: bytes::Bytes::from(format!("{} one\n", request.container)),
                rest,
            }))
        }));
    let params = kube::api::LogParams {
        follow: true,
        ..kube::api::LogParams::default()
    };
    let mut lines = Box::pin(pods.log_stream("placed", &params).await.unwrap().lines());
    let mut next = async || {
        tokio::time::timeout(WAIT, lines.next())
            .await
            .expect("a line or the end in time")
            .map(|l| l.unwrap())
    };
    assert_eq!(next().await.as_deref(), Some("app one"));
    later.send("two\n".into()).unwrap();
    assert_eq!(next().await.as_deref(), Some("two"));
    drop(later);
    assert_eq!(
        next().await,
        None,
        "the answer ends with the source's stream"
    );
    assert_eq!(
        pods.logs("unplaced", &Default::default()).await.unwrap(),
        "",
        "a pod on no node has no log yet"
    );
    let previous = kube::api::LogParams {
        previous: true,
        ..kube::api::LogParams::default()
    };
    let (code, reason, message) = api_error(pods.logs("placed", &previous).await.unwrap_err());
    assert_eq!(
        (code, reason.as_str(), message.as_str()),
        (400, "BadRequest", "no previous instance here")
    );
    let (code, _, message) = api_error(pods.logs("absent", &Default::default()).await.unwrap_err());
    assert_eq!((code, message.as_str()), (404, "pods \"absent\" not found"));
}

#[tokio::test]
async fn built_in_kinds_created_as_protobuf_by_client_go_are_stored_as_their_json() {
    let (_server, client) = server().await;
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/protobuf");
    let body = std::fs::read(fixtures.join("deployment.pb")).unwrap();
    let (code, created) = raw(
        &client,
        "POST",
        "/apis/apps/v1/namespaces/default/deployments",
        "application/vnd.kubernetes.protobuf",
        body,
    )
    .await;
    let created = json(&created);
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["spec"]["replicas"], json!(0));
    assert_eq!(
        created["spec"]["strategy"]["rollingUpdate"],
        json!({"maxSurge": "25%", "maxUnavailable": 0})
    );
    let container = &created["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["resources"]["limits"],
        json!({"cpu": "500m", "memory": "128Mi"})
    );
    assert_eq!(
        container["readinessProbe"]["httpGet"]["port"],
        json!("metrics")
    );

    for (fixture, path) in [
        ("service", "/api/v1/namespaces/default/services"),
        ("secret", "/api/v1/namespaces/default/secrets"),
    ] {
        let body = std::fs::read(fixtures.join(format!("{fixture}.pb"))).unwrap();
        let (code, created) = raw(
            &client,
            "POST",
            path,
            "application/vnd.kubernetes.protobuf",
            body,
        )
        .await;
        assert_eq!(code, 201, "{fixture}: {}", json(&created));
    }

    // The CRD's schema is decoded down to its `dependencies`, which a structural schema may
    // not use: refused as kube-apiserver refuses it.
    let body = std::fs::read(fixtures.join("customresourcedefinition.pb")).unwrap();
    let (code, refused) = raw(
        &client,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "application/vnd.kubernetes.protobuf",
        body,
    )
    .await;
    let refused = json(&refused);
    assert_eq!(code, 422, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("properties[billing].dependencies")),
        "{refused}"
    );
}

#[tokio::test]
async fn an_apply_or_a_put_that_creates_its_object_needs_the_create_verb_too() {
    let (server, client) = server().await;
    let roles: Api<Role> = Api::namespaced(client.clone(), "default");
    roles.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "patcher"}, "rules": [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "patch"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"]}]})).unwrap()).await.unwrap();
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), "default");
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "patcher"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "patcher"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}]}))
            .unwrap(),
        )
        .await
        .unwrap();
    let patcher = server
        .service_account_client("default", "default")
        .await
        .unwrap();
    let user = "system:serviceaccount:default:default";
    let configmaps: Api<ConfigMap> = Api::namespaced(patcher.clone(), "default");
    let applied = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"by": "patcher"}});
    let apply = PatchParams::apply("patcher");
    let (code, _, message) = api_error(
        configmaps
            .patch("new", &apply, &Patch::Apply(applied("new")))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 403);
    assert_eq!(
        message,
        format!(
            "configmaps \"new\" is forbidden: User \"{user}\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"default\""
        )
    );
    let admin_configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    admin_configmaps
        .create(
            &PostParams::default(),
            &serde_json::from_value(applied("old")).unwrap(),
        )
        .await
        .unwrap();
    configmaps
        .patch("old", &apply, &Patch::Apply(applied("old")))
        .await
        .expect("patch alone changes an object that exists");
    let leases: Api<Lease> = Api::namespaced(patcher, "default");
    let lease: Lease = serde_json::from_value(
        json!({"metadata": {"name": "put"}, "spec": {"holderIdentity": "x"}}),
    )
    .unwrap();
    let (code, _, message) = api_error(
        leases
            .replace("put", &PostParams::default(), &lease)
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 403);
    assert!(
        message.contains("cannot create resource \"leases\""),
        "{message}"
    );
}
