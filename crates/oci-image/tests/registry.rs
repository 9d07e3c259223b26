//! Pulls from a real registry: Debian's `docker-registry` (distribution v2), started on a
//! free 127.0.0.1 port with its storage in a temporary directory, and stopped (killed and
//! waited for) when the test ends, also on a panic ([`sim_test_support::registry`]).
//! Images are built with `write_layout` and pushed with oci-client; no docker CLI.
//!
//! Without `docker-registry` the tests that need it print why they did not run and pass,
//! unless `CI` is set: then they fail, saying what to install.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use oci_client::manifest::{OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use oci_image::{Credentials, ImageConfig, ImageError, ImageStore, PullOptions, write_layout};
use serde_json::{Value, json};
use sim_test_support::registry::{
    self, PASSWORD, Registry, USER, free_port, push_manifest, pusher,
};

/// An image built here: its layout blobs, ready to push.
struct Built {
    manifest: Vec<u8>,
    manifest_digest: String,
    config: Vec<u8>,
    config_digest: String,
    layer: Vec<u8>,
    layer_digest: String,
}

/// The config of the test image.
fn hello_config() -> ImageConfig {
    ImageConfig {
        entrypoint: vec!["/bin/hello".to_owned()],
        cmd: vec!["--loud".to_owned()],
        env: vec!["PATH=/bin".to_owned(), "GREETING=hi".to_owned()],
        working_dir: Some("/srv".to_owned()),
        user: None,
    }
}

/// Builds a one-layer image (`bin/hello`, `etc/motd`, `srv/`) with `write_layout`.
fn build_hello(work: &Path) -> Built {
    let rootfs = work.join("rootfs");
    std::fs::create_dir_all(rootfs.join("bin")).unwrap();
    std::fs::create_dir_all(rootfs.join("etc")).unwrap();
    std::fs::create_dir_all(rootfs.join("srv")).unwrap();
    std::fs::write(rootfs.join("bin/hello"), "#!/bin/sh\necho hello\n").unwrap();
    std::fs::set_permissions(
        rootfs.join("bin/hello"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(rootfs.join("etc/motd"), "pulled from a registry\n").unwrap();
    let layout = work.join("layout");
    let manifest_digest = write_layout(&layout, "hello", &rootfs, &hello_config()).unwrap();
    let blob = |digest: &str| {
        std::fs::read(
            layout
                .join("blobs/sha256")
                .join(digest.strip_prefix("sha256:").unwrap()),
        )
        .unwrap()
    };
    let manifest = blob(&manifest_digest);
    let parsed: Value = serde_json::from_slice(&manifest).unwrap();
    let config_digest = parsed["config"]["digest"].as_str().unwrap().to_owned();
    let layer_digest = parsed["layers"][0]["digest"].as_str().unwrap().to_owned();
    Built {
        config: blob(&config_digest),
        layer: blob(&layer_digest),
        manifest,
        manifest_digest,
        config_digest,
        layer_digest,
    }
}

/// Pushes `built` as `image`.
async fn push(client: &Client, auth: &RegistryAuth, image: &str, built: &Built) {
    let blobs = [
        (built.config.clone(), built.config_digest.clone()),
        (built.layer.clone(), built.layer_digest.clone()),
    ];
    registry::push(
        client,
        auth,
        image,
        &blobs,
        &built.manifest,
        OCI_IMAGE_MEDIA_TYPE,
    )
    .await;
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    let hash = sha2::Sha256::digest(bytes);
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// Checks that `image` is the one `build_hello` made, unpacked.
fn assert_is_hello(image: &oci_image::Image, built: &Built) {
    assert_eq!(image.digest, built.config_digest);
    assert_eq!(image.config, hello_config());
    assert_eq!(
        std::fs::read_to_string(image.rootfs.join("etc/motd")).unwrap(),
        "pulled from a registry\n"
    );
    let hello = image.rootfs.join("bin/hello");
    assert_eq!(
        std::fs::read_to_string(&hello).unwrap(),
        "#!/bin/sh\necho hello\n"
    );
    assert_eq!(
        hello.metadata().unwrap().permissions().mode() & 0o777,
        0o755
    );
    assert!(image.rootfs.join("srv").is_dir());
}

#[tokio::test]
async fn an_image_pushed_to_a_registry_is_pulled_by_tag_and_by_digest_and_unpacked() {
    let Some(registry) = Registry::start(false) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let built = build_hello(work.path());
    let tagged = registry.image("tools/hello:1.0");
    push(&pusher(), &RegistryAuth::Anonymous, &tagged, &built).await;

    let store = ImageStore::new(work.path().join("cache"));
    let image = store.pull(&tagged, &PullOptions::default()).await.unwrap();
    assert_is_hello(&image, &built);
    assert_eq!(
        image.rootfs,
        work.path()
            .join("cache/rootfs")
            .join(built.config_digest.strip_prefix("sha256:").unwrap())
    );

    let by_digest = registry.image(&format!("tools/hello@{}", built.manifest_digest));
    let again = store
        .pull(&by_digest, &PullOptions::default())
        .await
        .unwrap();
    assert_eq!(again, image);
    // Nothing is left of the downloads.
    let downloads = work.path().join("cache/downloads");
    assert_eq!(std::fs::read_dir(downloads).unwrap().count(), 0);
}

#[tokio::test]
async fn a_second_pull_of_a_cached_image_does_not_fetch_its_layers() {
    let Some(registry) = Registry::start(false) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let built = build_hello(work.path());
    let tagged = registry.image("tools/hello:1.0");
    push(&pusher(), &RegistryAuth::Anonymous, &tagged, &built).await;
    let store = ImageStore::new(work.path().join("cache"));
    let first = store.pull(&tagged, &PullOptions::default()).await.unwrap();

    // Without its layer in the registry, the image can only come from the cache.
    registry.delete_blob(&built.layer_digest);
    let second = store.pull(&tagged, &PullOptions::default()).await.unwrap();
    assert_eq!(second, first);
    assert_is_hello(&second, &built);

    let fresh = ImageStore::new(work.path().join("fresh-cache"));
    let err = fresh
        .pull(&tagged, &PullOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ImageError::Pull { .. }), "{err}: {err:?}");
    assert!(
        !work
            .path()
            .join("fresh-cache/rootfs")
            .join(built.config_digest.strip_prefix("sha256:").unwrap())
            .exists()
    );
}

/// The architecture of an image for another machine than this one.
fn other_arch() -> &'static str {
    if cfg!(target_arch = "s390x") {
        "riscv64"
    } else {
        "s390x"
    }
}

#[tokio::test]
async fn a_multi_platform_index_is_resolved_to_the_manifest_for_this_machine() {
    let Some(registry) = Registry::start(false) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let built = build_hello(work.path());
    let client = pusher();
    let anonymous = RegistryAuth::Anonymous;
    let repository = registry.image("tools/multi");
    push(&client, &anonymous, &format!("{repository}:native"), &built).await;

    // The same layer with a config and manifest for another architecture.
    let mut config: Value = serde_json::from_slice(&built.config).unwrap();
    config["architecture"] = json!(other_arch());
    let other_config = serde_json::to_vec(&config).unwrap();
    let mut manifest: Value = serde_json::from_slice(&built.manifest).unwrap();
    manifest["config"]["digest"] = json!(sha256(&other_config));
    manifest["config"]["size"] = json!(other_config.len());
    let other_manifest = serde_json::to_vec(&manifest).unwrap();
    let reference: Reference = format!("{repository}:other").parse().unwrap();
    client
        .push_blob(&reference, other_config.clone(), &sha256(&other_config))
        .await
        .unwrap();
    push_manifest(&client, &reference, &other_manifest, OCI_IMAGE_MEDIA_TYPE).await;

    let entry = |bytes: &[u8], arch: &str| {
        json!({
            "mediaType": OCI_IMAGE_MEDIA_TYPE,
            "digest": sha256(bytes),
            "size": bytes.len(),
            "platform": {"os": "linux", "architecture": arch},
        })
    };
    let this_arch = config_arch(&built.config);
    let index = |entries: Vec<Value>| {
        serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": OCI_IMAGE_INDEX_MEDIA_TYPE,
            "manifests": entries,
        }))
        .unwrap()
    };
    // This machine's manifest second, so that taking the first entry would be wrong.
    let both = index(vec![
        entry(&other_manifest, other_arch()),
        entry(&built.manifest, &this_arch),
    ]);
    let only_other = index(vec![entry(&other_manifest, other_arch())]);
    for (tag, bytes) in [("multi", &both), ("only-other", &only_other)] {
        let reference: Reference = format!("{repository}:{tag}").parse().unwrap();
        push_manifest(&client, &reference, bytes, OCI_IMAGE_INDEX_MEDIA_TYPE).await;
    }

    let store = ImageStore::new(work.path().join("cache"));
    let image = store
        .pull(&format!("{repository}:multi"), &PullOptions::default())
        .await
        .unwrap();
    assert_is_hello(&image, &built);

    let wanted = format!("{repository}:only-other");
    let err = store
        .pull(&wanted, &PullOptions::default())
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(err, ImageError::RegistryPlatform { .. }),
        "{message}"
    );
    assert!(message.contains(&wanted), "{message}");
    assert!(
        message.contains(&format!("linux/{}", other_arch())),
        "{message}"
    );
}

fn config_arch(config: &[u8]) -> String {
    let config: Value = serde_json::from_slice(config).unwrap();
    config["architecture"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn an_unknown_tag_is_reported_as_not_found_naming_the_reference_and_registry() {
    let Some(registry) = Registry::start(false) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let built = build_hello(work.path());
    push(
        &pusher(),
        &RegistryAuth::Anonymous,
        &registry.image("tools/hello:1.0"),
        &built,
    )
    .await;
    let store = ImageStore::new(work.path().join("cache"));
    for missing in ["tools/hello:2.0", "tools/nothing-here:1.0"] {
        let reference = registry.image(missing);
        let err = store
            .pull(&reference, &PullOptions::default())
            .await
            .unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, ImageError::ImageNotFound { .. }), "{message}");
        assert!(message.contains(&reference), "{message}");
        assert!(message.contains(&registry.host), "{message}");
        assert!(
            std::error::Error::source(&err).is_some(),
            "the registry's answer is kept"
        );
    }
}

#[tokio::test]
async fn a_registry_with_basic_auth_refuses_anonymous_pulls_and_serves_the_pull_secret() {
    let Some(registry) = Registry::start(true) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let built = build_hello(work.path());
    let tagged = registry.image("private/hello:1.0");
    let credentials = RegistryAuth::Basic(USER.to_owned(), PASSWORD.to_owned());
    push(&pusher(), &credentials, &tagged, &built).await;
    let store = ImageStore::new(work.path().join("cache"));

    let err = store
        .pull(&tagged, &PullOptions::default())
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, ImageError::Unauthorized { .. }), "{message}");
    assert!(message.contains(&tagged), "{message}");
    assert!(message.contains(&registry.host), "{message}");

    let wrong = PullOptions {
        credentials: Some(Credentials::new(USER, "wrong")),
        ..PullOptions::default()
    };
    let err = store.pull(&tagged, &wrong).await.unwrap_err();
    assert!(matches!(err, ImageError::Unauthorized { .. }), "{err}");

    // As the kubelet gets them: a `.dockerconfigjson` from an imagePullSecret.
    let secret = json!({"auths": {
        "registry.example.org": {"username": "someone", "password": "else"},
        (registry.host.clone()): {"auth": base64_of(&format!("{USER}:{PASSWORD}"))},
    }});
    let registry_host = oci_image::registry_of(&tagged).unwrap();
    assert_eq!(registry_host, registry.host);
    let options = PullOptions {
        credentials: Credentials::from_docker_config(&secret, &registry_host).unwrap(),
        ..PullOptions::default()
    };
    let image = store.pull(&tagged, &options).await.unwrap();
    assert_is_hello(&image, &built);
}

fn base64_of(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[tokio::test]
async fn a_registry_nobody_listens_for_is_reported_as_unreachable() {
    let cache = tempfile::tempdir().unwrap();
    let store = ImageStore::new(cache.path());
    let registry = format!("127.0.0.1:{}", free_port());
    let reference = format!("{registry}/tools/hello:1.0");
    let err = store
        .pull(&reference, &PullOptions::default())
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, ImageError::Unreachable { .. }), "{message}");
    assert!(message.contains(&reference), "{message}");
    assert!(message.contains(&registry), "{message}");
}
