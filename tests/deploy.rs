//! Deploying a directory of manifests through the API, as every provider does.

mod support;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use opconform::deploy::{Namespacing, apply_all, read_manifests};

#[tokio::test]
async fn a_manifest_directory_with_a_crd_and_its_resources_is_applied_into_a_namespace() {
    let (_server, client) = support::server().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("crd")).unwrap();
    std::fs::write(
        dir.path().join("crd/widgets.yaml"),
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("z-objects.yaml"),
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: op}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: \"1\"}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {size: 2}\n",
    )
    .unwrap();
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({"metadata": {"name": "team"}})).unwrap(),
    )
    .await
    .unwrap();
    let manifests = read_manifests(dir.path()).unwrap();
    assert_eq!(manifests.len(), 4);
    apply_all(&client, &manifests, Namespacing::Into("team"))
        .await
        .unwrap();
    // Applying again is a no-op that still succeeds.
    apply_all(&client, &manifests, Namespacing::Into("team"))
        .await
        .unwrap();
    let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), "team");
    assert!(sa.get("op").await.is_ok());
    let cm: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    assert_eq!(cm.get("settings").await.unwrap().data.unwrap()["a"], "1");
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(client, "team", &ApiResource::from_gvk(&gvk));
    assert_eq!(widgets.get("w").await.unwrap().data["spec"]["size"], 2);
}

#[tokio::test]
async fn objects_that_name_no_namespace_go_to_the_default_one_and_the_others_stay_where_they_say() {
    let (_server, client) = support::server().await;
    let nss: Api<Namespace> = Api::all(client.clone());
    for name in ["op-system", "elsewhere"] {
        nss.create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap(),
        )
        .await
        .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rbac.yaml"),
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: controller-manager}\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kept, namespace: elsewhere}\n",
    )
    .unwrap();
    let manifests = read_manifests(dir.path()).unwrap();
    apply_all(&client, &manifests, Namespacing::Default("op-system"))
        .await
        .unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "op-system");
    assert!(accounts.get("controller-manager").await.is_ok());
    let kept: Api<ConfigMap> = Api::namespaced(client.clone(), "elsewhere");
    assert!(kept.get("kept").await.is_ok());
    let not_moved: Api<ConfigMap> = Api::namespaced(client, "op-system");
    assert!(not_moved.get_opt("kept").await.unwrap().is_none());
}

#[tokio::test]
async fn a_kind_the_cluster_does_not_serve_is_named_in_the_error() {
    let (_server, client) = support::server().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gadget.yaml");
    std::fs::write(
        &file,
        "apiVersion: example.com/v9\nkind: Gadget\nmetadata: {name: g}\n",
    )
    .unwrap();
    let err = apply_all(
        &client,
        &read_manifests(&file).unwrap(),
        Namespacing::Default("default"),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "the cluster does not serve example.com/v9 Gadget (from {})",
            file.display()
        )
    );
}
