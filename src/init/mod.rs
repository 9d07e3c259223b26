//! `opconform init`: reads a kubebuilder or operator-sdk (Go) project — its `PROJECT`
//! file, its kustomize tree under `config/`, `cmd/main.go` — and writes an operator
//! profile for it, with a comment above each key saying where the value came from, and a
//! starter feature that uses the steps for any kind on the project's own kind. What it
//! cannot read from the project is listed, key by key, for the author to fill in.
//!
//! # Caveats
//! `cmd/main.go` is scanned for the scaffold's shapes, not parsed; the kustomize tree is
//! read file by file as the scaffold lays it out (`config/default` over `config/manager`,
//! `config/rbac`, `config/webhook`, `config/certmanager`), not rendered.

pub mod read;

use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use serde_yaml::{Mapping, Value};

use read::{GoValue, Kustomization, MainGo, ManagerDeployment, Project};

/// Errors of `opconform init`.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// The directory has no `PROJECT` file.
    #[error(
        "{dir} is not a kubebuilder or operator-sdk project: expected its PROJECT file at {}",
        dir.join("PROJECT").display()
    )]
    NotAProject {
        /// The directory.
        dir: PathBuf,
    },
    /// A file of the project could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A file of the project is not what the scaffold writes.
    #[error("{path}: {problem}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong and what was expected.
        problem: String,
    },
    /// A file to write exists already.
    #[error("{path} exists: pass --force to overwrite it")]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// A file could not be written.
    #[error("cannot write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// What `opconform init` is asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// The project's directory.
    pub dir: PathBuf,
    /// The profile to write [default: `opconform/profile.yaml` in the project].
    pub out: Option<PathBuf>,
    /// The directory of the starter feature [default: `opconform/features` in the project].
    pub features: Option<PathBuf>,
    /// Overwrite files that exist.
    pub force: bool,
}

/// A key of the profile that could not be read from the project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    /// The key, as a path from the top (`lock.name`).
    pub key: String,
    /// Why, and what to write there.
    pub why: String,
}

/// What `opconform init` wrote.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The profile.
    pub profile: PathBuf,
    /// The starter feature.
    pub feature: PathBuf,
    /// The keys not inferred.
    pub gaps: Vec<Gap>,
    /// What `opconform profile check` says of the profile as written, when it refuses it.
    pub check: Option<String>,
}

/// One top-level key of the profile, with where its value came from.
struct Entry {
    key: &'static str,
    source: String,
    value: Value,
}

/// What is read from a project, before it is written out.
struct Draft {
    entries: Vec<Entry>,
    gaps: Vec<Gap>,
    /// Arguments the profile adds to the manager, and why.
    args: Vec<(String, String)>,
}

impl Draft {
    fn set(&mut self, key: &'static str, source: impl Into<String>, value: impl Into<Value>) {
        self.entries.push(Entry {
            key,
            source: source.into(),
            value: value.into(),
        });
    }

    fn gap(&mut self, key: &str, why: impl Into<String>) {
        self.gaps.push(Gap {
            key: key.to_string(),
            why: why.into(),
        });
    }
}

/// A placeholder for a required value not inferred: `opconform profile check` refuses it,
/// naming its key.
const FILL_IN: &str = "FILL-IN";

fn read_text(path: &Path) -> Result<String, InitError> {
    std::fs::read_to_string(path).map_err(|source| InitError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn read_optional(path: &Path) -> Result<Option<String>, InitError> {
    if path.exists() {
        read_text(path).map(Some)
    } else {
        Ok(None)
    }
}

fn malformed(path: &Path) -> impl FnOnce(read::Problem) -> InitError + '_ {
    move |problem| InitError::Malformed {
        path: path.to_path_buf(),
        problem,
    }
}

/// The project's files as the profile needs them.
struct Sources {
    project: Project,
    default: Kustomization,
    manager_kustomization: Kustomization,
    deployment: ManagerDeployment,
    main_go: Option<(String, MainGo, String)>,
    dir: PathBuf,
}

impl Sources {
    fn read(dir: &Path) -> Result<Self, InitError> {
        let project_file = dir.join("PROJECT");
        if !project_file.is_file() {
            return Err(InitError::NotAProject {
                dir: dir.to_path_buf(),
            });
        }
        let project =
            read::project(&read_text(&project_file)?).map_err(malformed(&project_file))?;
        let kustomization = |sub: &str| -> Result<Kustomization, InitError> {
            let path = dir.join(sub).join("kustomization.yaml");
            match read_optional(&path)? {
                Some(text) => read::kustomization(&text).map_err(malformed(&path)),
                None => Ok(Kustomization::default()),
            }
        };
        let default = kustomization("config/default")?;
        let manager_kustomization = kustomization("config/manager")?;
        let manager_file = dir.join("config/manager/manager.yaml");
        let deployment = read::manager_deployment(&read_text(&manager_file)?)
            .map_err(malformed(&manager_file))?;
        let main_go = ["cmd/main.go", "main.go"]
            .into_iter()
            .map(|p| (p, dir.join(p)))
            .find(|(_, p)| p.is_file())
            .map(|(rel, path)| {
                read_text(&path).map(|text| (rel.to_string(), read::main_go(&text), text))
            })
            .transpose()?;
        Ok(Self {
            project,
            default,
            manager_kustomization,
            deployment,
            main_go,
            dir: dir.to_path_buf(),
        })
    }

    /// Whether `config/default` includes `entry` in its resources.
    fn enabled(&self, entry: &str) -> bool {
        self.default.resources.iter().any(|r| r == entry)
    }

    /// The arguments and volumes each enabled patch of `config/default` adds, by file.
    fn patches(&self) -> Result<Vec<(String, read::PatchAdds)>, InitError> {
        let mut adds = Vec::new();
        for patch in &self.default.patches {
            let path = self.dir.join("config/default").join(patch);
            if let Some(text) = read_optional(&path)?
                && let Some(found) = read::json_patch(&text).map_err(malformed(&path))?
            {
                adds.push((patch.clone(), found));
            }
        }
        Ok(adds)
    }

    /// The objects of the files a kustomization under `config/` lists.
    fn objects_of(&self, sub: &str) -> Result<Vec<(String, String)>, InitError> {
        let dir = self.dir.join("config").join(sub);
        let path = dir.join("kustomization.yaml");
        let Some(text) = read_optional(&path)? else {
            return Ok(Vec::new());
        };
        let k = read::kustomization(&text).map_err(malformed(&path))?;
        let mut objects = Vec::new();
        for file in k
            .resources
            .iter()
            .filter(|r| r.ends_with(".yaml") || r.ends_with(".yml"))
        {
            let path = dir.join(file);
            if let Some(text) = read_optional(&path)? {
                objects.extend(read::objects(&text).map_err(malformed(&path))?);
            }
        }
        Ok(objects)
    }
}

fn map<K: Into<Value>, V: Into<Value>>(pairs: impl IntoIterator<Item = (K, V)>) -> Value {
    Value::Mapping(
        pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect::<Mapping>(),
    )
}

fn seq<T: Into<Value>>(items: impl IntoIterator<Item = T>) -> Value {
    Value::Sequence(items.into_iter().map(Into::into).collect())
}

/// The flag name of an argument (`--webhook-port` of `--webhook-port=9443`).
fn flag_name(arg: &str) -> &str {
    arg.split_once('=').map_or(arg, |(name, _)| name)
}

/// The value an argument list gives `--name`, if any.
fn arg_value<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter().rev().find_map(|a| {
        let (flag, value) = a.split_once('=').unwrap_or((a, "true"));
        (flag.trim_start_matches('-') == name).then_some(value)
    })
}

/// Reads the project in `dir` into a profile's keys, and the gaps.
fn draft(s: &Sources, profile_dir: &Path) -> Result<Draft, InitError> {
    let mut d = Draft {
        entries: Vec::new(),
        gaps: Vec::new(),
        args: Vec::new(),
    };
    let prefix = &s.default.name_prefix;
    let project_rel = relative(profile_dir, &s.dir);
    let in_project = |p: &str| -> String {
        let joined = project_rel.join(p);
        joined.to_string_lossy().into_owned()
    };

    d.set("name", "PROJECT's projectName", s.project.name.clone());
    match &s.default.namespace {
        Some(ns) => d.set(
            "namespace",
            "config/default/kustomization.yaml's namespace",
            ns.clone(),
        ),
        None => {
            d.set("namespace", "not inferred", FILL_IN);
            d.gap(
                "namespace",
                "config/default/kustomization.yaml sets no namespace: write the namespace the \
                 manifests put the manager in",
            );
        }
    }
    d.set(
        "deployment",
        format!(
            "config/default's namePrefix {prefix:?} + config/manager/manager.yaml's Deployment"
        ),
        format!("{prefix}{}", s.deployment.name),
    );
    let mut selector = s.deployment.match_labels.clone();
    selector.extend(s.default.selector_labels.clone());
    if selector.is_empty() {
        d.gap(
            "podSelector",
            "the manager Deployment has no spec.selector.matchLabels: write labels of its pods",
        );
        selector.insert(FILL_IN.into(), FILL_IN.into());
    }
    d.set(
        "podSelector",
        "the manager Deployment's spec.selector.matchLabels (config/manager/manager.yaml)",
        map(selector),
    );

    let patches = s.patches()?;
    let mut args = s.deployment.args.clone();
    for (_, adds) in &patches {
        args.extend(adds.args.iter().cloned());
    }
    metrics(s, &mut d, &args);
    election(s, &mut d);

    let image = s
        .manager_kustomization
        .images
        .iter()
        .chain(&s.default.images)
        .find(|(name, _)| {
            let bare = s
                .deployment
                .image
                .split([':', '@'])
                .next()
                .unwrap_or_default();
            *name == bare || **name == s.deployment.image
        })
        .map(|(_, image)| image.clone());
    match image {
        Some(image) => d.set(
            "image",
            "config/manager/kustomization.yaml's images (`kustomize edit set image`)",
            image,
        ),
        None if s.deployment.image.is_empty() => {
            d.set("image", "not inferred", FILL_IN);
            d.gap(
                "image",
                "the manager container names no image: write the image you build",
            );
        }
        None => {
            if s.deployment.image == "controller:latest" {
                d.gap(
                    "image",
                    "the manifests name the scaffold's controller:latest: after `make \
                     docker-build IMG=…` (and `cd config/manager && kustomize edit set image \
                     controller=…`), write that image here",
                );
            }
            d.set(
                "image",
                "the manager container's image in config/manager/manager.yaml",
                s.deployment.image.clone(),
            );
        }
    }

    binary(s, &mut d, &project_rel);
    d.set(
        "manifests",
        "the scaffold's kustomize tree, rendered as `kubectl kustomize config/default`",
        map([("kustomize", in_project("config/default"))]),
    );
    webhooks(s, &mut d, &patches)?;
    if let Some((file, main, _)) = &s.main_go
        && main.controller_runtime
    {
        d.set(
            "needsContainer",
            format!(
                "{file} makes a controller-runtime manager: it finds its leader-election \
                 namespace in the pod's service-account files{} and binds fixed ports",
                if main.election_namespace == GoValue::Missing {
                    ""
                } else {
                    " (unless LeaderElectionNamespace is set)"
                }
            ),
            true,
        );
    }
    work(s, &mut d, &in_project)?;
    Ok(d)
}

fn metrics(s: &Sources, d: &mut Draft, args: &[String]) {
    let main = s.main_go.as_ref().map(|(_, m, _)| m);
    let bind = arg_value(args, "metrics-bind-address")
        .map(|v| {
            (
                v.to_string(),
                "the manager's --metrics-bind-address (config/default's patches)",
            )
        })
        .or_else(|| {
            main.and_then(|m| m.flag("metrics-bind-address")).map(|f| {
                (
                    f.default.trim_matches('"').to_string(),
                    "--metrics-bind-address's default in main.go",
                )
            })
        });
    let port = bind.as_ref().and_then(|(addr, _)| {
        addr.rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .filter(|p| *p != 0)
    });
    let has_flag = |name: &str| main.is_some_and(|m| m.flag(name).is_some());
    if port.is_none()
        && let Some((addr, from)) = &bind
        && has_flag("metrics-bind-address")
    {
        d.args.push((
            "--metrics-bind-address=:8080".into(),
            format!("metrics on :8080 ({from} is {addr:?}: none as deployed)"),
        ));
        let mut why = "the profile turns them on over HTTP";
        if has_flag("metrics-secure") {
            d.args
                .push(("--metrics-secure=false".into(), "over HTTP".into()));
        } else if main.is_some_and(|m| m.secure_serving != GoValue::Missing) {
            why = "the profile turns them on (check the scheme: SecureServing is set)";
        }
        d.gap(
            "metrics",
            format!(
                "{from} is {addr:?}: the manager serves no metrics as deployed; {why} on :8080 \
                 (manager.args); or enable config/default's [METRICS] patch and run init again"
            ),
        );
        d.set(
            "metrics",
            format!("{from} is {addr:?}: none as deployed; {why}, with manager.args"),
            map([("port", 8080)]),
        );
        return;
    }
    let Some(port) = port else {
        d.set("metrics", "not inferred", map([("port", 8080)]));
        d.gap(
            "metrics",
            match bind {
                Some((addr, from)) => format!(
                    "{from} is {addr:?}: the manager serves no metrics as deployed; enable \
                     config/default's [METRICS] patch (--metrics-bind-address=:8443) or give \
                     the port it serves them on"
                ),
                None => "no --metrics-bind-address in the manifests or main.go: write the port \
                         the manager serves its metrics on"
                    .into(),
            },
        );
        return;
    };
    let (secure, secure_from) = match arg_value(args, "metrics-secure") {
        Some(v) => (
            Some(v == "true"),
            "the manager's --metrics-secure".to_string(),
        ),
        None => match main.map(|m| (&m.secure_serving, m)) {
            Some((GoValue::Literal(v), _)) => {
                (Some(v == "true"), "SecureServing in main.go".into())
            }
            Some((GoValue::Expr(var), m)) => match m.flag_of(var) {
                Some(f) => (
                    Some(f.default == "true"),
                    format!("--{}'s default ({}) in main.go", f.name, f.default),
                ),
                None => (
                    None,
                    format!("SecureServing: {var} in main.go, not a literal"),
                ),
            },
            _ => (Some(false), "no SecureServing in main.go".into()),
        },
    };
    let mut value = Mapping::new();
    value.insert("port".into(), port.into());
    let mut source = format!("{}: :{port}", bind.map_or("", |(_, from)| from));
    match secure {
        Some(true) => {
            value.insert("scheme".into(), "https".into());
            source.push_str(&format!("; https: {secure_from}"));
        }
        Some(false) => source.push_str(&format!("; http: {secure_from}")),
        None => d.gap(
            "metrics.scheme",
            format!("{secure_from}: write `scheme: https` if the metrics are served over HTTPS"),
        ),
    }
    if secure == Some(true) && main.is_some_and(|m| m.metrics_auth) {
        match metrics_reader(s) {
            Some(role) => {
                source.push_str(&format!(
                    "; behind controller-runtime's authentication filter (main.go): a token \
                     bound to the ClusterRole {role} (config/rbac, with the namePrefix)"
                ));
                value.insert("token".into(), map([("clusterRole", role)]));
            }
            None => d.gap(
                "metrics.token",
                "the metrics are behind controller-runtime's authentication filter, but no \
                 ClusterRole of config/rbac may get /metrics: write {clusterRole: …}",
            ),
        }
    }
    d.set("metrics", source, Value::Mapping(value));
}

/// The metrics-reader ClusterRole of `config/rbac`, with the namePrefix.
fn metrics_reader(s: &Sources) -> Option<String> {
    let dir = s.dir.join("config/rbac");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files.iter().find_map(|f| {
        let text = std::fs::read_to_string(f).ok()?;
        let name = read::metrics_reader(&text).ok()??;
        Some(format!("{}{name}", s.default.name_prefix))
    })
}

/// A Lease whose name was not read: a placeholder, and why.
fn lock_not_inferred(d: &mut Draft, why: impl Into<String>) {
    d.set(
        "lock",
        "not inferred",
        map([("kind", "Lease"), ("name", FILL_IN)]),
    );
    d.gap("lock.name", why);
}

fn election(s: &Sources, d: &mut Draft) {
    let Some((file, main, _)) = &s.main_go else {
        lock_not_inferred(
            d,
            "no cmd/main.go: write the leader-election id of the manager",
        );
        d.set(
            "election",
            "not inferred",
            map([("lease", map([("timings", "15s/10s/2s")]))]),
        );
        d.gap(
            "election",
            "no cmd/main.go: write how the manager elects its leader",
        );
        return;
    };
    match &main.election_id {
        GoValue::Literal(id) => d.set(
            "lock",
            format!(
                "{file}'s LeaderElectionID; controller-runtime's lock is a Lease, its holder \
                 <host name>_<uuid>"
            ),
            map([("kind", "Lease"), ("name", id.as_str())]),
        ),
        other => {
            lock_not_inferred(
                d,
                match other {
                    GoValue::Expr(expr) => format!(
                        "{file} sets LeaderElectionID to {expr}, not a literal: write the name \
                         of the Lease it makes"
                    ),
                    _ => format!(
                        "{file} sets no LeaderElectionID: write the name of the Lease the \
                         manager elects its leader with"
                    ),
                },
            );
        }
    }
    let (args, how) = match &main.leader_election {
        GoValue::Expr(var) => match main.flag_of(var) {
            Some(flag) => {
                let arg = format!("--{}", flag.name);
                let how = if s.deployment.args.contains(&arg) {
                    format!("the manifests already pass {arg}")
                } else {
                    format!("{arg} turns it on")
                };
                (vec![arg], how)
            }
            None => {
                d.gap(
                    "election.lease.args",
                    format!(
                        "{file} sets LeaderElection to {var}, which no flag sets: write the \
                         arguments that turn leader election on"
                    ),
                );
                (Vec::new(), format!("LeaderElection: {var}"))
            }
        },
        GoValue::Literal(v) if v == "true" => (Vec::new(), "LeaderElection: true".into()),
        _ => {
            d.gap(
                "election",
                format!("{file} does not turn on leader election: write how the manager elects"),
            );
            (Vec::new(), "not inferred".into())
        }
    };
    let timings = if main.timings_set.is_empty() {
        "controller-runtime's defaults (main.go sets no LeaseDuration, RenewDeadline, RetryPeriod)"
    } else {
        d.gap(
            "election.lease.timings",
            format!(
                "{file} sets {}: write the timings it runs with (LEASE/RENEW/RETRY), or, if \
                 flags set them, the flags with {{leaseDuration}}, {{renewDeadline}} and \
                 {{retryPeriod}}",
                main.timings_set.join(", ")
            ),
        );
        "not inferred: controller-runtime's defaults written"
    };
    d.set(
        "election",
        format!("{how}; the timings are {timings}"),
        map([(
            "lease",
            map([("timings", Value::from("15s/10s/2s")), ("args", seq(args))]),
        )]),
    );
}

fn binary(s: &Sources, d: &mut Draft, project_rel: &Path) {
    let module = project_rel.to_string_lossy().into_owned();
    let Some((file, _, text)) = &s.main_go else {
        d.set("binary", "not inferred", map([("env", "OPERATOR_BIN")]));
        d.gap(
            "binary",
            "no cmd/main.go or main.go: write where the manager's binary comes from",
        );
        return;
    };
    if !s.dir.join("go.mod").is_file() {
        d.gap(
            "binary.go.module",
            "no go.mod in the project: write the module's directory",
        );
    }
    let package_dir = Path::new(file)
        .parent()
        .filter(|p| !p.as_os_str().is_empty());
    let package = package_dir.map_or(".".to_string(), |p| format!("./{}", p.display()));
    let mut sources = vec!["go.mod".to_string(), "go.sum".to_string()];
    sources.extend(package_dir.map(|p| p.display().to_string()));
    if let Some(repo) = &s.project.repo {
        for import in read::module_imports(text, repo) {
            let top = import[repo.len() + 1..]
                .split('/')
                .next()
                .unwrap_or_default();
            if !top.is_empty() && !sources.iter().any(|x| x == top) {
                sources.push(top.to_string());
            }
        }
    }
    if package_dir.is_none() {
        sources.push(file.clone());
    }
    d.gap(
        "binary.env",
        "not set (optional): a variable that, when set, names a manager binary you built \
         yourself, used instead of the go build",
    );
    d.set(
        "binary",
        format!(
            "a Go binary: the module of go.mod, its main package {package} ({file}); the \
             sources are that package and the module's directories it imports"
        ),
        map([(
            "go",
            map([
                ("module", Value::from(module)),
                ("package", package.into()),
                ("sources", seq(sources)),
            ]),
        )]),
    );
}

fn webhooks(
    s: &Sources,
    d: &mut Draft,
    patches: &[(String, read::PatchAdds)],
) -> Result<(), InitError> {
    let mut manager = Mapping::new();
    manager.insert("container".into(), s.deployment.container.clone().into());
    let mut sources = vec!["the manager container of config/manager/manager.yaml".to_string()];
    let main = s.main_go.as_ref().map(|(_, m, _)| m);
    let mut leave_out = None;
    let switch = main.is_some_and(|m| m.webhooks_env);
    if switch {
        manager.insert("env".into(), map([("ENABLE_WEBHOOKS", "false")]));
        sources.push(
            "its webhooks off (ENABLE_WEBHOOKS=false, as main.go allows and `make run` does): \
             without cert-manager there is no certificate for them"
                .into(),
        );
    }
    if s.enabled("../webhook") {
        if switch {
            let (mut remove_args, mut remove_volumes) = (Vec::new(), Vec::new());
            for (file, adds) in patches.iter().filter(|(f, _)| f.contains("webhook")) {
                remove_args.extend(adds.args.iter().map(|a| flag_name(a).to_string()));
                remove_volumes.extend(adds.volumes.iter().cloned());
                sources.push(format!(
                    "the arguments and volumes config/default/{file} adds are removed"
                ));
            }
            if !remove_args.is_empty() {
                manager.insert("removeArgs".into(), seq(remove_args));
            }
            if !remove_volumes.is_empty() {
                manager.insert("removeVolumes".into(), seq(remove_volumes));
            }
            let mut kinds = Vec::new();
            let mut objects = Vec::new();
            let mut parts = vec!["webhook"];
            if s.enabled("../certmanager") {
                parts.push("certmanager");
            }
            for part in parts {
                for (kind, name) in s.objects_of(part)? {
                    if kind == "Service" {
                        objects.push(format!("Service/{}{name}", s.default.name_prefix));
                    } else if !kinds.contains(&kind) {
                        kinds.push(kind);
                    }
                }
            }
            kinds.sort();
            let mut value = Mapping::new();
            if !kinds.is_empty() {
                value.insert("kinds".into(), seq(kinds));
            }
            if !objects.is_empty() {
                value.insert("objects".into(), seq(objects));
            }
            if !value.is_empty() {
                leave_out = Some(Value::Mapping(value));
            }
        } else {
            d.gap(
                "manager",
                "config/default enables ../webhook, and main.go has no ENABLE_WEBHOOKS switch: \
                 the manager needs cert-manager's certificate, which the harness does not make; \
                 turn the webhooks off (manager.env, manager.removeArgs, leaveOut)",
            );
        }
    }
    let mut args = Vec::new();
    for (arg, why) in &d.args {
        args.push(arg.clone());
        sources.push(format!("{arg}: {why}"));
    }
    if main.is_some_and(|m| m.zap_flags) {
        args.push("--zap-time-encoding=rfc3339nano".into());
        sources.push("its log times to the nanosecond, for the timeline (zap's flags)".into());
    }
    if !args.is_empty() {
        manager.insert("args".into(), seq(args));
    }
    d.set("manager", sources.join("; "), Value::Mapping(manager));
    if let Some(value) = leave_out {
        d.set(
            "leaveOut",
            "the objects of config/webhook and config/certmanager, unused with the webhooks off",
            value,
        );
    }
    Ok(())
}

fn work(s: &Sources, d: &mut Draft, in_project: &dyn Fn(&str) -> String) -> Result<(), InitError> {
    let Some(sample) = first_sample(s)? else {
        d.gap(
            "work",
            "no sample in config/samples for the project's kind: write `work` to give the \
             leader work (objects and the writes that prove it)",
        );
        return Ok(());
    };
    let own_groups: Vec<String> = s.project.resources.iter().map(|r| r.api_group()).collect();
    let role = s.dir.join("config/rbac/role.yaml");
    let writes = match read_optional(&role)? {
        Some(text) => read::created_resources(&text, &own_groups).map_err(malformed(&role))?,
        None => Vec::new(),
    };
    d.gap(
        "work.more",
        "a JSON merge patch that gives the leader more work (e.g. {spec: {size: 2}}) is not \
         inferred: without it the scenarios that give the leader new work fail",
    );
    let mut value = Mapping::new();
    value.insert("objects".into(), in_project(&sample.file).into());
    let source = if writes.is_empty() {
        d.gap(
            "work.writes",
            "config/rbac/role.yaml lets the manager create nothing but its own kinds: write \
             the resources whose writes prove its work",
        );
        value.insert("writes".into(), seq([FILL_IN]));
        format!("the first sample, {}", sample.file)
    } else {
        value.insert("writes".into(), seq(writes));
        format!(
            "the first sample, {}; the writes that prove the work are what \
             config/rbac/role.yaml lets the manager create",
            sample.file
        )
    };
    d.set("work", source, Value::Mapping(value));
    Ok(())
}

/// A sample object of the project's kind.
struct Sample {
    /// Its file, relative to the project.
    file: String,
    /// The file's text.
    text: String,
    /// The object.
    object: Value,
}

/// The first sample of `config/samples` of the project's first kind: in the order of its
/// kustomization, else of the file names.
fn first_sample(s: &Sources) -> Result<Option<Sample>, InitError> {
    let Some(resource) = s.project.resources.first() else {
        return Ok(None);
    };
    let dir = s.dir.join("config/samples");
    if !dir.is_dir() {
        return Ok(None);
    }
    let path = dir.join("kustomization.yaml");
    let mut files = match read_optional(&path)? {
        Some(text) => {
            read::kustomization(&text)
                .map_err(malformed(&path))?
                .resources
        }
        None => Vec::new(),
    };
    let mut listed: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|source| InitError::Read {
            path: dir.clone(),
            source,
        })?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| (n.ends_with(".yaml") || n.ends_with(".yml")) && n != "kustomization.yaml")
        .collect();
    listed.sort();
    files.extend(listed);
    for file in files {
        let path = dir.join(&file);
        let Some(text) = read_optional(&path)? else {
            continue;
        };
        let docs = read::documents(&text).map_err(malformed(&path))?;
        if let Some(object) = docs.into_iter().find(|o| {
            o.get("kind").and_then(Value::as_str) == Some(resource.kind.as_str())
                && o.get("apiVersion").and_then(Value::as_str)
                    == Some(resource.api_version().as_str())
        }) {
            return Ok(Some(Sample {
                file: format!("config/samples/{file}"),
                text,
                object,
            }));
        }
    }
    Ok(None)
}

/// The components of `p` without `.`, and `..` folded into what it follows.
fn components(p: &Path) -> Vec<Component<'_>> {
    let mut out: Vec<Component<'_>> = Vec::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.last(), Some(Component::Normal(_))) => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// `to` relative to the directory `from` (both made absolute first).
pub fn relative(from: &Path, to: &Path) -> PathBuf {
    let (from, to) = (
        std::path::absolute(from).unwrap_or_else(|_| from.to_path_buf()),
        std::path::absolute(to).unwrap_or_else(|_| to.to_path_buf()),
    );
    let (from, to) = (components(&from), components(&to));
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut rel = PathBuf::new();
    for _ in common..from.len() {
        rel.push("..");
    }
    for c in &to[common..] {
        rel.push(c.as_os_str());
    }
    if rel.as_os_str().is_empty() {
        rel.push(".");
    }
    rel
}

/// The profile's text: a header, then each key with a comment saying where it came from.
fn profile_text(d: &Draft, project: &Project) -> String {
    let mut out = format!(
        "# The operator profile of {}, written by `opconform init` from the project's\n\
         # files (the format: `opconform profile schema`); relative paths are relative to\n\
         # this file's directory. Above each key, where its value came from; FILL-IN marks a\n\
         # value it could not read, which `opconform profile check` refuses until it is\n\
         # written.\n",
        project.name
    );
    for entry in &d.entries {
        for line in wrap(&entry.source, 88) {
            let _ = writeln!(out, "# {line}");
        }
        let mut one = Mapping::new();
        one.insert(entry.key.into(), entry.value.clone());
        out.push_str(&serde_yaml::to_string(&Value::Mapping(one)).unwrap_or_default());
    }
    out
}

/// `text` in lines of at most `width` characters, broken at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let line = lines.last_mut().expect("one line at least");
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(word.to_string());
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines
}

/// The starter feature: the first sample applied and matched, and, when the manager
/// elects a leader, one leader among three replicas.
fn feature_text(s: &Sources, d: &Draft) -> Option<String> {
    let resource = s.project.resources.first()?;
    let kind = &resource.kind;
    let mut out = format!(
        "Feature: {kind}\n  \
         A starter written by `opconform init` for {project}: a {kind} of config/samples\n  \
         is applied and found as written, and the manager elects one leader. Add what the\n  \
         operator promises with opconform's steps for any kind (its own example:\n  \
         `opconform test any-kind`, features/any_kind.feature).\n\n  \
         Background:\n    Given a cluster\n",
        project = s.project.name,
    );
    if let Ok(Some(sample)) = first_sample(s) {
        let name = sample
            .object
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("sample");
        let applied: String = sample
            .text
            .split("\n---")
            .find(|doc| doc.contains(&format!("kind: {kind}")))
            .unwrap_or(&sample.text)
            .lines()
            .filter(|l| {
                !l.trim_start().starts_with('#') && !l.trim().is_empty() && l.trim() != "---"
            })
            .map(|l| format!("      {l}\n"))
            .collect();
        let _ = write!(
            out,
            "\n  Scenario: The sample {kind} applied is there as written\n    \
             Given the operator is deployed with 1 replica and the flags \"\"\n    \
             When these objects are applied:\n      \"\"\"\n{applied}      \"\"\"\n    \
             Then within 30s these objects match:\n      \"\"\"\n      \
             apiVersion: {api_version}\n      kind: {kind}\n      metadata:\n        \
             name: {name}\n      \"\"\"\n",
            api_version = resource.api_version(),
        );
    }
    let elects = d.entries.iter().any(|e| e.key == "election")
        && !d.gaps.iter().any(|g| g.key == "election");
    if elects {
        let timings = d
            .entries
            .iter()
            .find(|e| e.key == "election")
            .and_then(|e| {
                e.value
                    .get("lease")?
                    .get("timings")?
                    .as_str()
                    .map(str::to_string)
            })
            .unwrap_or_else(|| "15s/10s/2s".into());
        let _ = write!(
            out,
            "\n  @lease\n  Scenario: Exactly one of three replicas leads\n    \
             Given the operator is deployed with 3 replicas in lease mode with timings {timings}\n    \
             Then within 60s exactly one replica leads\n    \
             And there was never more than one leader\n"
        );
    }
    Some(out)
}

fn write_file(path: &Path, text: &str) -> Result<(), InitError> {
    let failed = |source| InitError::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(failed)?;
    }
    std::fs::write(path, text).map_err(failed)
}

/// Reads the project and writes the profile and the starter feature.
///
/// # Errors
/// No `PROJECT` file, a file of the project that cannot be read or is not what the
/// scaffold writes, a file to write that exists (without `force`) or cannot be written.
///
/// # Caveats
/// It does not check the profile against a cluster: [`Outcome::check`] is what
/// `opconform profile check` says of it.
pub fn run(options: &Options) -> Result<Outcome, InitError> {
    let sources = Sources::read(&options.dir)?;
    let profile = options
        .out
        .clone()
        .unwrap_or_else(|| options.dir.join("opconform/profile.yaml"));
    let profile_dir = profile
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let features = options
        .features
        .clone()
        .unwrap_or_else(|| options.dir.join("opconform/features"));
    let kind = sources
        .project
        .resources
        .first()
        .map_or_else(|| sources.project.name.clone(), |r| r.kind.to_lowercase());
    let feature = features.join(format!("{kind}.feature"));
    if !options.force
        && let Some(existing) = [&profile, &feature].into_iter().find(|p| p.exists())
    {
        return Err(InitError::Exists {
            path: existing.clone(),
        });
    }
    let mut draft = draft(&sources, &profile_dir)?;
    if sources.project.resources.is_empty() {
        draft.gap(
            "work",
            "PROJECT has no resources: the starter feature has no kind to apply",
        );
    }
    let text = profile_text(&draft, &sources.project);
    let feature_text = feature_text(&sources, &draft).unwrap_or_else(|| {
        format!(
            "Feature: {}\n  A starter written by `opconform init`.\n\n  Background:\n    \
             Given a cluster\n",
            sources.project.name
        )
    });
    write_file(&profile, &text)?;
    write_file(&feature, &feature_text)?;
    let check = crate::profile::Profile::read(&profile)
        .err()
        .map(|e| crate::error_chain(&e));
    Ok(Outcome {
        profile,
        feature,
        gaps: draft.gaps,
        check,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_made_relative_to_a_directory_beside_or_above_it() {
        assert_eq!(
            relative(Path::new("/p/opconform"), Path::new("/p")),
            Path::new("..")
        );
        assert_eq!(relative(Path::new("/p"), Path::new("/p")), Path::new("."));
        assert_eq!(
            relative(Path::new("/a/b"), Path::new("/a/c/d")),
            Path::new("../c/d")
        );
    }

    #[test]
    fn an_argument_list_gives_the_last_value_of_a_flag() {
        let args: Vec<String> = [
            "--metrics-bind-address=:8080",
            "--leader-elect",
            "--metrics-bind-address=:8443",
        ]
        .map(String::from)
        .into();
        assert_eq!(arg_value(&args, "metrics-bind-address"), Some(":8443"));
        assert_eq!(arg_value(&args, "leader-elect"), Some("true"));
        assert_eq!(arg_value(&args, "metrics-secure"), None);
        assert_eq!(flag_name("--webhook-port=9443"), "--webhook-port");
    }

    #[test]
    fn a_long_comment_is_wrapped_at_spaces() {
        assert_eq!(wrap("aa bb cc", 5), ["aa bb", "cc"]);
    }
}
