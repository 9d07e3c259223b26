//! CEL as kube-apiserver's admission evaluates it (k8s.io/apiserver/pkg/admission/plugin/cel):
//! the expressions of admission webhooks' `matchConditions` and of ValidatingAdmissionPolicies,
//! compiled when a configuration is written and evaluated per request with the variables
//! Kubernetes declares — `object`, `oldObject`, `request` (the AdmissionRequest without its
//! objects, as JSON has it), `namespaceObject`, `params`, `variables` and `authorizer`
//! (RBAC checks of the requester or a service account, `authorizer.requestResource`) —, and
//! the validation rules of CRDs, with `self` and `oldSelf` ([`super::validation_rules`]).
//!
//! The environment is the `cel` crate's standard library (with the macros `has`, `all`,
//! `exists`, `exists_one`, `map` and `filter`, `matches`, durations, timestamps and
//! optionals) and its strings, lists, math and encoders extensions (`lowerAscii`, `split`,
//! `join`, `indexOf`, `sort`, …), plus Kubernetes' libraries (k8s.io/apiserver/pkg/cel/library),
//! one module each: the lists' `isSorted`, `sum`, `min`, `max`, and `indexOf` and
//! `lastIndexOf` of lists ([`lists`]), the regex functions `find` and `findAll`, and the
//! `url` ([`url`]), `quantity` ([`quantity`]), IP ([`ip`]), CIDR ([`cidr`]), semver
//! ([`semver`]) and `format` ([`format`]) libraries, whose values are types of their own
//! (`net.IP`, `kubernetes.Quantity`, …) compared with `==` as cel-go compares them.
//!
//! Compile errors and evaluation errors are worded as cel-go words them (`ERROR:
//! <input>:1:8: Syntax error: …` with the source line and a caret; `no such key: x`).
//!
//! # Caveats
//! - There is no type checker: an expression is refused at compile time for its syntax and for
//!   a reference to a variable the environment does not declare, not for a type error
//!   (`object.x + 1 == "a"` fails when evaluated instead), and a non-bool condition is an
//!   evaluation error, not a compile error. Only a field the typed `request` and
//!   `namespaceObject` lack is refused (`undefined field 'x'`), as cel-go's checker refuses
//!   it, and, for a CRD's validation rules, a field `self`'s schema lacks
//!   ([`Expression::undefined_fields`]).
//! - `authorizer` answers from RBAC alone (the Node authorizer is not consulted), from a
//!   snapshot of the roles and bindings taken when an expression names it; its decisions
//!   never error.
//! - A library's value (an IP, a quantity, …) cannot be the value of a policy's variable,
//!   which is kept as JSON: such a variable fails when evaluated. The `cel` crate's
//!   `string(double)` writes a double its own way (`100000000`), not as cel-go's `%g` does
//!   (`1e+08`). A quantity whose exact value leaves 128-bit decimals (`1e300` added to `1`)
//!   fails when evaluated where apimachinery falls back to big numbers.
//! - There is no cost budget.

mod cidr;
mod format;
mod ip;
mod lists;
mod quantity;
mod semver;
mod url;

use std::sync::{Arc, LazyLock};

use serde_json::Value;

/// Makes `$rust` a CEL value of the type cel-go names `$name` (the libraries' opaque and
/// object types), equal to another by its `PartialEq`.
macro_rules! opaque_value {
    ($rust:ty, $name:literal) => {
        impl ::cel::common::value::Val for $rust {
            fn get_type(&self) -> &::cel::common::types::Type {
                <Self as ::cel::common::value::Val>::cel_type()
            }
            fn cel_type() -> &'static ::cel::common::types::Type {
                static TYPE: ::cel::common::types::Type =
                    ::cel::common::types::Type::new_unspecified_type($name);
                &TYPE
            }
            fn equals(&self, other: &dyn ::cel::common::value::Val) -> bool {
                other
                    .downcast_ref::<Self>()
                    .is_some_and(|other| other == self)
            }
            fn clone_as_boxed<'v>(&self) -> Box<dyn ::cel::common::value::Val + 'v>
            where
                Self: 'v,
            {
                Box::new(self.clone())
            }
            fn as_any(&self) -> Option<&dyn ::std::any::Any> {
                Some(self)
            }
        }
        impl ::cel::common::value::StaticVal for $rust {}
    };
}
use opaque_value;

/// A string as Go's `%q` and `strconv.Quote` write it.
fn go_quote(text: &str) -> String {
    format!("{text:?}")
}

/// Why an expression did not compile or evaluate, worded as the real server words it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CelError {
    /// The expression does not compile: cel-go's issues, one `ERROR:` per line group.
    #[error("compilation failed: {0}")]
    Compile(String),
    /// The expression failed when evaluated.
    #[error("expression '{expression}' resulted in error: {message}")]
    Evaluation {
        /// The expression as written.
        expression: String,
        /// cel-go's wording of the error.
        message: String,
    },
}

/// The variables an environment declares: beyond `object`, `oldObject`, `request` and
/// `namespaceObject`, which every admission environment has, or, for a CRD's validation rule,
/// only `self` and `oldSelf`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Declarations {
    /// A CRD validation rule's environment (`x-kubernetes-validations`): `self` and `oldSelf`
    /// and none of the admission variables.
    pub validation_rule: bool,
    /// `params` (a policy with a `paramKind`).
    pub params: bool,
    /// `authorizer` (webhooks' match conditions and policies).
    pub authorizer: bool,
    /// `variables` (policies).
    pub variables: bool,
}

impl Declarations {
    fn declares(&self, name: &str) -> bool {
        if self.validation_rule {
            return matches!(name, "self" | "oldSelf");
        }
        match name {
            "object" | "oldObject" | "request" | "namespaceObject" => true,
            "params" => self.params,
            "authorizer" => self.authorizer,
            "variables" => self.variables,
            _ => false,
        }
    }
}

/// A compiled expression.
pub struct Expression {
    source: String,
    program: cel::Program,
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Expression").field(&self.source).finish()
    }
}

/// The environment every expression is compiled and evaluated in.
static ENVIRONMENT: LazyLock<Arc<cel::Env>> = LazyLock::new(|| {
    let mut env = cel::Env::stdlib();
    // cel-go keeps the last of repeated map keys.
    env.set_error_on_duplicate_map_keys(false);
    for extension in [
        cel::extensions::strings as fn(&mut cel::Env) -> _,
        cel::extensions::lists,
        cel::extensions::math,
        cel::extensions::encoders,
        lists::extension,
        ip::extension,
        cidr::extension,
        quantity::extension,
        semver::extension,
        url::extension,
        format::extension,
    ] {
        if let Err(e) = env.add_extension(extension) {
            tracing::warn!("a CEL extension could not be added: {e}");
        }
    }
    Arc::new(env)
});

/// One of cel-go's issues: `ERROR: <input>:line:column: message`, the source line and a caret
/// under the column.
fn issue(source: &str, line: usize, column: usize, message: &str) -> String {
    let mut text = format!("ERROR: <input>:{line}:{column}: {message}");
    if let Some(snippet) = source.lines().nth(line.saturating_sub(1)) {
        let snippet = snippet.replace('\t', " ");
        let dots = column.saturating_sub(1).min(snippet.chars().count());
        text.push_str(&format!("\n | {snippet}\n | {}^", ".".repeat(dots)));
    }
    text
}

/// The names before the dot of the libraries' namespaced functions (`ip.isCanonical`,
/// `format.named`, `optional.of`), which are no variables.
const FUNCTION_NAMESPACES: &[&str] = &["ip", "format", "optional"];

/// CEL's type names (`type(x) == int`), which are no variables.
const TYPE_NAMES: &[&str] = &[
    "bool",
    "bytes",
    "double",
    "int",
    "list",
    "map",
    "null_type",
    "string",
    "type",
    "uint",
];

/// The names the comprehension macros bind (`x` of `list.all(x, …)`), which are no free
/// variables.
fn bound_names(source: &str) -> Vec<String> {
    let mut names = Vec::new();
    for macro_name in ["all(", "exists(", "exists_one(", "map(", "filter("] {
        let mut rest = source;
        while let Some(at) = rest.find(macro_name) {
            let after = &rest[at + macro_name.len()..];
            let name: String = after
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.push(name);
            }
            rest = after;
        }
    }
    names
}

/// The object types of the typed variables (BuildRequestType, BuildNamespaceType): each
/// field with its own object type, or `""` for one that is no object (a string, list, map or
/// `dyn`), below which anything may be selected.
const TYPES: &[(&str, &[(&str, &str)])] = &[
    (
        "request",
        &[
            ("kind", "gvk"),
            ("resource", "gvr"),
            ("subResource", ""),
            ("requestKind", "gvk"),
            ("requestResource", "gvr"),
            ("requestSubResource", ""),
            ("name", ""),
            ("namespace", ""),
            ("operation", ""),
            ("userInfo", "userInfo"),
            ("dryRun", ""),
            ("options", ""),
        ],
    ),
    ("gvk", &[("group", ""), ("version", ""), ("kind", "")]),
    ("gvr", &[("group", ""), ("version", ""), ("resource", "")]),
    (
        "userInfo",
        &[("username", ""), ("uid", ""), ("groups", ""), ("extra", "")],
    ),
    (
        "namespaceObject",
        &[
            ("metadata", "namespaceMetadata"),
            ("spec", "namespaceSpec"),
            ("status", "namespaceStatus"),
        ],
    ),
    (
        "namespaceMetadata",
        &[
            ("name", ""),
            ("generateName", ""),
            ("namespace", ""),
            ("labels", ""),
            ("annotations", ""),
            // Sic: the real server's type names the uid `UID`.
            ("UID", ""),
            ("creationTimestamp", ""),
            ("deletionGracePeriodSeconds", ""),
            ("deletionTimestamp", ""),
            ("generation", ""),
            ("resourceVersion", ""),
            ("finalizers", ""),
        ],
    ),
    ("namespaceSpec", &[("finalizers", "")]),
    ("namespaceStatus", &[("conditions", ""), ("phase", "")]),
];

/// What a select chain from a variable (`request.userInfo`: the variable and the fields
/// selected) is known to be: an object with these fields, or `None` where anything may be
/// selected.
pub type FieldsOf<'f> = &'f dyn Fn(&str, &[&str]) -> Option<Vec<String>>;

/// The fields of the typed admission variables (`request` and `namespaceObject`) and of their
/// fields, from [`TYPES`].
fn admission_fields(variable: &str, path: &[&str]) -> Option<Vec<String>> {
    if !matches!(variable, "request" | "namespaceObject") {
        return None;
    }
    let mut type_name = variable;
    for field in path {
        let (_, fields) = TYPES.iter().find(|(name, _)| *name == type_name)?;
        let (_, child) = fields.iter().find(|(name, _)| name == field)?;
        if child.is_empty() {
            return None;
        }
        type_name = child;
    }
    let (_, fields) = TYPES.iter().find(|(name, _)| *name == type_name)?;
    Some(fields.iter().map(|(name, _)| (*name).to_string()).collect())
}

/// The variable and the fields of a plain select chain (`a.b.c`, no `has()`), if `expr` is one.
fn select_chain(expr: &cel::IdedExpr) -> Option<(&str, Vec<&str>)> {
    use cel::common::ast::Expr;
    match &expr.expr {
        Expr::Ident(name) => Some((name.as_str(), Vec::new())),
        Expr::Select(select) if !select.test => {
            let (root, mut path) = select_chain(&select.operand)?;
            path.push(select.field.as_str());
            Some((root, path))
        }
        _ => None,
    }
}

/// The fields selected from a typed object that its type does not have: cel-go's checker
/// refuses them (`undefined field 'x'`). Each with the text of its chain, e.g.
/// `request.foo`, and whether it is a `has()` test.
fn undefined_fields(
    expr: &cel::IdedExpr,
    bound: &[String],
    fields_of: FieldsOf<'_>,
    found: &mut Vec<(String, bool)>,
) {
    use cel::common::ast::{EntryExpr, Expr};
    match &expr.expr {
        Expr::Select(select) => {
            if let Some((root, path)) = select_chain(&select.operand)
                && !bound.iter().any(|b| b == root)
                && let Some(fields) = fields_of(root, &path)
                && !fields.contains(&select.field)
            {
                found.push((chain_text(expr), select.test));
            }
            undefined_fields(&select.operand, bound, fields_of, found);
        }
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                undefined_fields(target, bound, fields_of, found);
            }
            for arg in &call.args {
                undefined_fields(arg, bound, fields_of, found);
            }
        }
        Expr::Comprehension(comprehension) => {
            let mut inner = bound.to_vec();
            inner.push(comprehension.iter_var.clone());
            inner.extend(comprehension.iter_var2.clone());
            inner.push(comprehension.accu_var.clone());
            undefined_fields(&comprehension.iter_range, bound, fields_of, found);
            undefined_fields(&comprehension.accu_init, bound, fields_of, found);
            for part in [
                &comprehension.loop_cond,
                &comprehension.loop_step,
                &comprehension.result,
            ] {
                undefined_fields(part, &inner, fields_of, found);
            }
        }
        Expr::List(list) => {
            for element in &list.elements {
                undefined_fields(element, bound, fields_of, found);
            }
        }
        Expr::Map(map) => {
            for entry in &map.entries {
                if let EntryExpr::MapEntry(entry) = &entry.expr {
                    undefined_fields(&entry.key, bound, fields_of, found);
                    undefined_fields(&entry.value, bound, fields_of, found);
                }
            }
        }
        _ => {}
    }
}

/// cel-go's issues for the undefined fields of `program`, in source order; `None` when
/// there are none.
fn undefined_field_issues(
    source: &str,
    program: &cel::Program,
    fields_of: FieldsOf<'_>,
) -> Option<String> {
    let mut undefined = Vec::new();
    undefined_fields(program.expression(), &[], fields_of, &mut undefined);
    if undefined.is_empty() {
        return None;
    }
    let mut issues: Vec<((usize, usize), String)> = undefined
        .iter()
        .map(|(chain, test)| {
            let position = undefined_field_position(source, chain, *test);
            let field = chain.rsplit('.').next().unwrap_or_default();
            (
                position,
                issue(
                    source,
                    position.0,
                    position.1,
                    &format!("undefined field '{field}'"),
                ),
            )
        })
        .collect();
    issues.sort();
    Some(
        issues
            .into_iter()
            .map(|(_, issue)| issue)
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// The source text of a select chain (`request.userInfo.foo`).
fn chain_text(expr: &cel::IdedExpr) -> String {
    use cel::common::ast::Expr;
    match &expr.expr {
        Expr::Ident(name) => name.clone(),
        Expr::Select(select) => format!("{}.{}", chain_text(&select.operand), select.field),
        _ => String::new(),
    }
}

/// Where cel-go reports an undefined field: the `.` before it, or a `has()` test's `(`.
fn undefined_field_position(source: &str, chain: &str, test: bool) -> (usize, usize) {
    let compact: String = source.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(at) = compact.find(chain) else {
        return (1, 1);
    };
    let field = chain.rsplit('.').next().unwrap_or_default();
    let mut index = at + chain.len() - field.len() - 1;
    if test && compact[..at].ends_with("has(") {
        index = at - 1;
    }
    // Back from the compacted text to the source: count the non-space characters.
    let mut seen = 0;
    for (line_index, line) in source.lines().enumerate() {
        for (column, c) in line.chars().enumerate() {
            if c.is_whitespace() {
                continue;
            }
            if seen == index {
                return (line_index + 1, column + 1);
            }
            seen += 1;
        }
    }
    (1, 1)
}

/// Where `name` first stands as an identifier in `source`: 1-based line and column.
fn position_of(source: &str, name: &str) -> (usize, usize) {
    for (index, line) in source.lines().enumerate() {
        let mut from = 0;
        while let Some(at) = line[from..].find(name) {
            let start = from + at;
            let before = line[..start].chars().next_back();
            let after = line[start + name.len()..].chars().next();
            let is_ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
            if !is_ident(before) && !is_ident(after) && before != Some('.') {
                return (index + 1, line[..start].chars().count() + 1);
            }
            from = start + name.len();
        }
    }
    (1, 1)
}

/// The expressions compiled so far, with their environment's declarations.
type Compiled =
    std::collections::HashMap<(String, Declarations), Result<Arc<Expression>, CelError>>;

/// The compiled expressions kept: configurations are evaluated on every write, and parsing is
/// the dearest part of an evaluation.
static COMPILED: LazyLock<std::sync::Mutex<Compiled>> = LazyLock::new(Default::default);

/// How many compiled expressions are kept before the cache starts over.
const COMPILED_KEPT: usize = 4096;

/// Compiles `source` in an environment declaring `declared` (once: the outcome is kept).
///
/// # Errors
/// [`CelError::Compile`] with cel-go's issues.
pub fn compile(source: &str, declared: Declarations) -> Result<Arc<Expression>, CelError> {
    let key = (source.to_string(), declared);
    if let Some(compiled) = COMPILED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&key)
    {
        return compiled.clone();
    }
    let compiled = compile_uncached(source, declared).map(Arc::new);
    let mut kept = COMPILED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if kept.len() >= COMPILED_KEPT {
        kept.clear();
    }
    kept.insert(key, compiled.clone());
    compiled
}

fn compile_uncached(source: &str, declared: Declarations) -> Result<Expression, CelError> {
    let program = ENVIRONMENT.compile(source).map_err(|errors| {
        CelError::Compile(
            errors
                .errors
                .iter()
                .map(|e| {
                    issue(
                        source,
                        usize::try_from(e.pos.0).unwrap_or(1),
                        usize::try_from(e.pos.1).unwrap_or(1),
                        &e.msg,
                    )
                })
                .collect::<Vec<_>>()
                .join("\n"),
        )
    })?;
    let bound = bound_names(source);
    let references = program.references();
    let mut undeclared: Vec<&str> = references
        .variables()
        .into_iter()
        .filter(|v| !v.starts_with('@') && !declared.declares(v))
        .filter(|v| !FUNCTION_NAMESPACES.contains(v) && !TYPE_NAMES.contains(v))
        .filter(|v| !bound.iter().any(|b| b == v))
        .collect();
    undeclared.sort_by_key(|v| position_of(source, v));
    if !undeclared.is_empty() {
        return Err(CelError::Compile(
            undeclared
                .iter()
                .map(|v| {
                    let (line, column) = position_of(source, v);
                    issue(
                        source,
                        line,
                        column,
                        &format!("undeclared reference to '{v}' (in container '')"),
                    )
                })
                .collect::<Vec<_>>()
                .join("\n"),
        ));
    }
    if let Some(issues) = undefined_field_issues(source, &program, &admission_fields) {
        return Err(CelError::Compile(issues));
    }
    Ok(Expression {
        source: source.to_string(),
        program,
    })
}

/// Answers an `authorizer` check: the service account asked about (`None`: the requester)
/// and what it would do.
pub type AuthorizerCheck =
    dyn Fn(Option<(&str, &str)>, &super::auth::Attributes) -> super::auth::Decision + Send + Sync;

/// The `authorizer` variable: RBAC as it stood when the request was admitted.
#[derive(Clone)]
pub struct Authorizer {
    /// The check.
    pub check: Arc<AuthorizerCheck>,
    /// `authorizer.requestResource`: the request's resource (its verb unset).
    pub request_resource: super::auth::Attributes,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer")
            .field("request_resource", &self.request_resource)
            .finish_non_exhaustive()
    }
}

/// An authorizer over a snapshot of the store's RBAC objects for `user`'s requests.
pub fn authorizer(
    store: &super::store::Store,
    user: &super::auth::UserInfo,
    request_resource: super::auth::Attributes,
) -> Authorizer {
    let snapshot = super::store::Store::new(1);
    for resource in [
        "clusterroles",
        "clusterrolebindings",
        "roles",
        "rolebindings",
    ] {
        let gr = super::status::GroupResource::new("rbac.authorization.k8s.io", resource);
        for object in store.list(&gr, None).0 {
            let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let _ = snapshot.write::<()>(&gr, namespace, name, |_| {
                Ok(super::store::Write::Put(object.clone()))
            });
        }
    }
    let user = user.clone();
    Authorizer {
        check: Arc::new(move |account, attributes| match account {
            Some((namespace, name)) => super::auth::authorize(
                &snapshot,
                &super::auth::UserInfo::service_account(namespace, name, ""),
                attributes,
            ),
            None => super::auth::authorize(&snapshot, &user, attributes),
        }),
        request_resource,
    }
}

/// The values of the variables of one evaluation, as JSON; `None` leaves a variable unbound.
#[derive(Debug, Clone, Default)]
pub struct Activation {
    /// `object`: null for a delete.
    pub object: Value,
    /// `oldObject`: null for a create.
    pub old_object: Value,
    /// `request`: see [`admission_request`].
    pub request: Value,
    /// `namespaceObject`: null for cluster-scoped resources.
    pub namespace_object: Value,
    /// `params`: null without one.
    pub params: Value,
    /// `variables`: the policy's variables evaluated so far, by name.
    pub variables: serde_json::Map<String, Value>,
    /// `authorizer`: unbound when `None`.
    pub authorizer: Option<Authorizer>,
    /// A validation rule's `self`, already typed by its schema: unbound when `None`.
    pub rule_self: Option<cel::Value>,
    /// A validation rule's `oldSelf` (an optional for a rule with `optionalOldSelf`): unbound
    /// when `None`.
    pub rule_old_self: Option<cel::Value>,
}

/// A resource check of `authorizer` as CEL holds it: a map its functions read.
fn resource_check(attributes: &super::auth::Attributes) -> Value {
    serde_json::json!({"@check": "resource", "group": attributes.group,
        "resource": attributes.resource, "subresource": attributes.subresource,
        "namespace": attributes.namespace, "name": attributes.name})
}

/// Kubernetes' authorizer library over `authorizer`: `path`, `group`, `serviceAccount`,
/// `resource`, `subresource`, `namespace`, `name`, `check`, and a decision's `allowed`,
/// `reason`, `errored` and `error`.
fn add_authorizer_functions(context: &mut cel::Context<'_, '_>, authorizer: &Authorizer) {
    use cel::extractors::This;
    fn with(this: &cel::Value, key: &str, value: &str, check: &str) -> cel::Value {
        let mut json = json_of(this);
        if json["@check"].is_null() || check == "path" {
            json["@check"] = Value::String(check.to_string());
        }
        json[key] = Value::String(value.to_string());
        cel_value(&json)
    }
    let mut added = Vec::new();
    for (function, check) in [
        ("group", "resource"),
        ("resource", "resource"),
        ("subresource", "resource"),
        ("namespace", "resource"),
        ("name", "resource"),
        ("path", "path"),
    ] {
        added.push(context.add_function(
            function,
            move |This(this): This<cel::Value>, value: Arc<String>| {
                with(&this, function, &value, check)
            },
        ));
    }
    added.push(context.add_function(
        "serviceAccount",
        |This(_): This<cel::Value>, namespace: Arc<String>, name: Arc<String>| {
            cel_value(&serde_json::json!({"@account": [namespace.as_str(), name.as_str()]}))
        },
    ));
    let answer = Arc::clone(&authorizer.check);
    added.push(context.add_function(
        "check",
        move |This(this): This<cel::Value>, verb: Arc<String>| {
            let json = json_of(&this);
            let field = |key: &str| json[key].as_str().unwrap_or_default().to_string();
            let attributes = super::auth::Attributes {
                verb: verb.to_string(),
                resource_request: json["@check"] != "path",
                group: field("group"),
                resource: field("resource"),
                subresource: field("subresource"),
                namespace: field("namespace"),
                name: field("name"),
                path: field("path"),
            };
            let account = json["@account"].as_array().map(|a| {
                (
                    a.first()
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    a.get(1)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                )
            });
            let decision = answer(
                account.as_ref().map(|(n, s)| (n.as_str(), s.as_str())),
                &attributes,
            );
            cel_value(
                &serde_json::json!({"@decision": true, "allowed": decision.allowed,
                "reason": decision.reason}),
            )
        },
    ));
    added.push(
        context.add_function("allowed", |This(this): This<cel::Value>| {
            json_of(&this)["allowed"].as_bool().unwrap_or(false)
        }),
    );
    added.push(
        context.add_function("reason", |This(this): This<cel::Value>| {
            json_of(&this)["reason"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        }),
    );
    added.push(context.add_function("errored", |This(_): This<cel::Value>| false));
    added.push(context.add_function("error", |This(_): This<cel::Value>| String::new()));
    for result in added {
        if let Err(e) = result {
            tracing::warn!("an authorizer function could not be added: {e}");
        }
    }
}

/// A JSON value as CEL sees it.
fn cel_value(json: &Value) -> cel::Value {
    cel::to_value(json).unwrap_or(cel::Value::Null)
}

/// A CEL value as JSON (for variables, which later expressions read).
pub fn json_of(value: &cel::Value) -> Value {
    match value {
        cel::Value::List(items) => Value::Array(items.iter().map(json_of).collect()),
        cel::Value::Map(map) => Value::Object(
            map.map
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        cel::objects::Key::String(s) => s.to_string(),
                        cel::objects::Key::Int(i) => i.to_string(),
                        cel::objects::Key::Uint(u) => u.to_string(),
                        cel::objects::Key::Bool(b) => b.to_string(),
                    };
                    (key, json_of(v))
                })
                .collect(),
        ),
        cel::Value::Int(i) => Value::from(*i),
        cel::Value::UInt(u) => Value::from(*u),
        cel::Value::Float(f) => Value::from(*f),
        cel::Value::String(s) => Value::String(s.to_string()),
        cel::Value::Bool(b) => Value::Bool(*b),
        cel::Value::Duration(d) => Value::String(format!("{}s", d.num_seconds())),
        cel::Value::Timestamp(t) => Value::String(t.to_rfc3339()),
        _ => Value::Null,
    }
}

/// cel-go's wording of an evaluation error.
fn go_message(error: &cel::ExecutionError) -> String {
    use cel::ExecutionError as E;
    match error {
        E::NoSuchKey(key) => format!("no such key: {key}"),
        E::UndeclaredReference(name) => format!("no such attribute(s): {name}"),
        E::NoSuchOverload(_) | E::UnsupportedBinaryOperator(..) | E::ValuesNotComparable(..) => {
            "no such overload".to_string()
        }
        E::DivisionByZero(_) => "division by zero".to_string(),
        E::RemainderByZero(_) => "modulus by zero".to_string(),
        E::FunctionError { message, .. } => message.clone(),
        other => {
            let text = other.to_string();
            let mut chars = text.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_lowercase().chain(chars).collect()
            })
        }
    }
}

/// A function's error, as cel-go's Kubernetes libraries word it.
fn function_error(function: &str, message: impl Into<String>) -> cel::ExecutionError {
    cel::ExecutionError::FunctionError {
        function: function.to_string(),
        message: message.into(),
    }
}

/// The greatest or least item of a list (Kubernetes' `max()` and `min()`).
fn extreme(
    function: &str,
    items: &[cel::Value],
    wanted: std::cmp::Ordering,
) -> Result<cel::Value, cel::ExecutionError> {
    let mut best = items
        .first()
        .ok_or_else(|| function_error(function, format!("{function} called on empty list")))?;
    for item in &items[1..] {
        match item.partial_cmp(best) {
            Some(order) if order == wanted => best = item,
            Some(_) => {}
            None => return Err(function_error(function, "no such overload")),
        }
    }
    Ok(best.clone())
}

/// A regular expression of the regex library, or its error.
fn regex_of(function: &str, pattern: &str) -> Result<regex::Regex, cel::ExecutionError> {
    regex::Regex::new(pattern)
        .map_err(|e| function_error(function, format!("error parsing regexp: {e}")))
}

/// Kubernetes' CEL libraries beyond the crate's extensions: of the lists library `isSorted`,
/// `sum`, `min` and `max`; of the regex library `find` and `findAll`.
fn add_kubernetes_functions(context: &mut cel::Context<'_, '_>) {
    use cel::extractors::{Arguments, This};
    type Items = Arc<Vec<cel::Value>>;
    let added = [
        context.add_function("isSorted", |This(items): This<Items>| {
            items
                .windows(2)
                .all(|pair| pair[0].partial_cmp(&pair[1]) != Some(std::cmp::Ordering::Greater))
        }),
        context.add_function("sum", |This(items): This<Items>| {
            let mut total = cel::Value::Int(0);
            for item in items.iter() {
                total = match (&total, item) {
                    (cel::Value::Int(a), cel::Value::Int(b)) => cel::Value::Int(a + b),
                    (cel::Value::Int(0), cel::Value::Float(_) | cel::Value::UInt(_)) => {
                        item.clone()
                    }
                    (cel::Value::UInt(a), cel::Value::UInt(b)) => cel::Value::UInt(a + b),
                    (cel::Value::Float(a), cel::Value::Float(b)) => cel::Value::Float(a + b),
                    _ => return Err(function_error("sum", "no such overload")),
                };
            }
            Ok(total)
        }),
        context.add_function("min", |This(items): This<Items>| {
            extreme("min", &items, std::cmp::Ordering::Less)
        }),
        context.add_function("max", |This(items): This<Items>| {
            extreme("max", &items, std::cmp::Ordering::Greater)
        }),
        context.add_function(
            "find",
            |This(text): This<Arc<String>>, pattern: Arc<String>| {
                let found = regex_of("find", &pattern)?
                    .find(&text)
                    .map_or_else(String::new, |m| m.as_str().to_string());
                Ok::<_, cel::ExecutionError>(cel::Value::String(Arc::new(found)))
            },
        ),
        context.add_function(
            "findAll",
            |This(text): This<Arc<String>>, Arguments(arguments): Arguments| {
                let pattern = match arguments.first() {
                    Some(cel::Value::String(p)) => p.clone(),
                    _ => return Err(function_error("findAll", "no such overload")),
                };
                let limit = match arguments.get(1) {
                    Some(cel::Value::Int(n)) if *n >= 0 => Some(*n as usize),
                    _ => None,
                };
                let found: Vec<cel::Value> = regex_of("findAll", &pattern)?
                    .find_iter(&text)
                    .take(limit.unwrap_or(usize::MAX))
                    .map(|m| cel::Value::String(Arc::new(m.as_str().to_string())))
                    .collect();
                Ok(cel::Value::List(Arc::new(found)))
            },
        ),
    ];
    for result in added {
        if let Err(e) = result {
            tracing::warn!("a Kubernetes CEL function could not be added: {e}");
        }
    }
}

impl Expression {
    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// cel-go's checker issues (`undefined field 'x'`) for the fields the expression selects
    /// from objects `fields_of` knows and that lack them; `None` when there are none.
    pub fn undefined_fields(&self, fields_of: FieldsOf<'_>) -> Option<String> {
        undefined_field_issues(&self.source, &self.program, fields_of)
    }

    /// Whether the expression names the variable `name` (a validation rule that names
    /// `oldSelf` is a transition rule).
    pub fn references(&self, name: &str) -> bool {
        self.program
            .references()
            .variables()
            .into_iter()
            .any(|variable| variable == name)
    }

    /// Evaluates the expression with `activation`'s variables.
    ///
    /// # Errors
    /// [`CelError::Evaluation`] with cel-go's wording.
    pub fn evaluate(&self, activation: &Activation) -> Result<cel::Value, CelError> {
        let mut context = cel::Context::with_env(Arc::clone(&ENVIRONMENT));
        context.add_variable_from_value("object", cel_value(&activation.object));
        context.add_variable_from_value("oldObject", cel_value(&activation.old_object));
        context.add_variable_from_value("request", cel_value(&activation.request));
        context.add_variable_from_value("namespaceObject", cel_value(&activation.namespace_object));
        context.add_variable_from_value("params", cel_value(&activation.params));
        context.add_variable_from_value(
            "variables",
            cel_value(&Value::Object(activation.variables.clone())),
        );
        if let Some(value) = &activation.rule_self {
            context.add_variable_from_value("self", value.clone());
        }
        if let Some(value) = &activation.rule_old_self {
            context.add_variable_from_value("oldSelf", value.clone());
        }
        add_kubernetes_functions(&mut context);
        if let Some(authorizer) = &activation.authorizer {
            let mut value = serde_json::json!({"@authorizer": true});
            value["requestResource"] = resource_check(&authorizer.request_resource);
            context.add_variable_from_value("authorizer", cel_value(&value));
            add_authorizer_functions(&mut context, authorizer);
        }
        self.program
            .execute(&context)
            .map_err(|e| CelError::Evaluation {
                expression: self.source.clone(),
                message: go_message(&e),
            })
    }

    /// Evaluates a condition: an expression that must give a bool.
    ///
    /// # Errors
    /// As [`Expression::evaluate`], and a result that is no bool.
    pub fn holds(&self, activation: &Activation) -> Result<bool, CelError> {
        match self.evaluate(activation)? {
            cel::Value::Bool(b) => Ok(b),
            other => Err(CelError::Evaluation {
                expression: self.source.clone(),
                message: format!("no such overload: expected bool, got {:?}", other.type_of()),
            }),
        }
    }
}

/// The AdmissionRequest as CEL's `request` sees it (cel.CreateAdmissionRequest, converted as
/// JSON is): the fields Go omits when empty (`subResource`, `name`, `namespace`, the user's
/// `uid` and `groups`, …) are absent, so reading one is `no such key`.
#[allow(clippy::too_many_arguments)]
pub fn admission_request(
    kind: (&str, &str, &str),
    resource: (&str, &str, &str),
    request_kind: (&str, &str, &str),
    request_resource: (&str, &str, &str),
    subresource: &str,
    name: &str,
    namespace: &str,
    operation: &str,
    user: &super::auth::UserInfo,
    dry_run: bool,
    options: &Value,
) -> Value {
    let gvk = |(group, version, kind): (&str, &str, &str)| serde_json::json!({"group": group, "version": version, "kind": kind});
    let gvr = |(group, version, resource): (&str, &str, &str)| serde_json::json!({"group": group, "version": version, "resource": resource});
    let mut user_info = serde_json::Map::new();
    for (key, value) in [("username", &user.name), ("uid", &user.uid)] {
        if !value.is_empty() {
            user_info.insert(key.into(), Value::String(value.clone()));
        }
    }
    if !user.groups.is_empty() {
        user_info.insert("groups".into(), serde_json::json!(user.groups));
    }
    let mut request = serde_json::json!({
        "kind": gvk(kind),
        "resource": gvr(resource),
        "requestKind": gvk(request_kind),
        "requestResource": gvr(request_resource),
        "operation": operation,
        "userInfo": user_info,
        "dryRun": dry_run,
        "options": options,
    });
    for (key, value) in [
        ("subResource", subresource),
        ("requestSubResource", subresource),
        ("name", name),
        ("namespace", namespace),
    ] {
        if !value.is_empty() {
            request[key] = Value::String(value.to_string());
        }
    }
    request
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn with_object(object: Value) -> Activation {
        Activation {
            object,
            ..Activation::default()
        }
    }

    #[test]
    fn a_condition_reads_the_object_through_the_standard_macros_and_functions() {
        let object = json!({"metadata": {"name": "web-1", "labels": {"app": "web"}},
            "spec": {"ports": [80, 443]}});
        for (source, expected) in [
            ("object.metadata.name.startsWith('web')", true),
            (
                "has(object.metadata.labels) && object.metadata.labels.app == 'web'",
                true,
            ),
            ("has(object.spec.replicas)", false),
            ("object.spec.ports.all(p, p > 0)", true),
            ("object.spec.ports.exists_one(p, p == 80)", true),
            ("object.spec.ports.filter(p, p > 100).size() == 1", true),
            ("object.metadata.name.matches('^web-[0-9]+$')", true),
            ("'Web'.lowerAscii() == 'web'", true),
            ("object.metadata.name.split('-') == ['web', '1']", true),
            ("duration('1m') > duration('30s')", true),
            ("oldObject == null", true),
            ("[1, 2, 2].isSorted() && ![2, 1].isSorted()", true),
            (
                "[1, 2, 3].sum() == 6 && [1, 5, 3].max() == 5 && [4, 2].min() == 2",
                true,
            ),
            ("'abc 123 def 456'.find('[0-9]+') == '123'", true),
            (
                "'abc 123 def 456'.findAll('[0-9]+') == ['123', '456']",
                true,
            ),
            ("'a1 b2 c3'.findAll('[0-9]', 2) == ['1', '2']", true),
        ] {
            let expression = compile(source, Declarations::default()).unwrap();
            assert_eq!(
                expression.holds(&with_object(object.clone())),
                Ok(expected),
                "{source}"
            );
        }
    }

    /// Asserts that `source` compiles and fails when evaluated with `message`.
    fn assert_evaluation_error(source: &str, message: &str) {
        let expression = compile(source, Declarations::default()).unwrap();
        match expression.holds(&Activation::default()) {
            Err(CelError::Evaluation { message: got, .. }) => assert_eq!(got, message, "{source}"),
            other => panic!("{source}: {other:?}"),
        }
    }

    #[test]
    fn kubernetes_libraries_answer_as_cel_go_s_do() {
        for (source, expected) in [
            (
                "[1, 2, 2, 3].indexOf(2) == 1 && [1, 2, 2, 3].lastIndexOf(2) == 2",
                true,
            ),
            ("['a'].indexOf('b') == -1 && 'abc'.indexOf('c') == 2", true),
            (
                "ip('10.0.0.1').family() == 4 && ip('::1').isLoopback()",
                true,
            ),
            (
                "ip('fe80::1').isLinkLocalUnicast() && ip('ff02::1').isLinkLocalMulticast()",
                true,
            ),
            (
                "ip('192.168.0.1').isGlobalUnicast() && !ip('255.255.255.255').isGlobalUnicast()",
                true,
            ),
            (
                "string(ip('2001:DB8::1')) == '2001:db8::1' && !ip.isCanonical('2001:DB8::1')",
                true,
            ),
            (
                "ip('10.0.0.1') == ip('10.0.0.1') && ip('10.0.0.1') != ip('10.0.0.2')",
                true,
            ),
            (
                "!isIP('1.2.3') && isCIDR('10.0.0.0/8') && !isCIDR('10.0.0.0')",
                true,
            ),
            (
                "cidr('10.1.2.3/8').containsIP('10.9.9.9') && !cidr('10.0.0.0/8').containsIP(ip('11.0.0.1'))",
                true,
            ),
            (
                "cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16') && !cidr('10.1.0.0/16').containsCIDR('10.0.0.0/8')",
                true,
            ),
            (
                "string(cidr('10.1.2.3/8').masked()) == '10.0.0.0/8' && cidr('10.1.2.3/8').ip() == ip('10.1.2.3')",
                true,
            ),
            ("cidr('::1/128').prefixLength() == 128", true),
            (
                "quantity('1Ki').asInteger() == 1024 && quantity('1.5').asApproximateFloat() == 1.5",
                true,
            ),
            (
                "!quantity('1000m').isInteger() && quantity('1k').isInteger()",
                true,
            ),
            (
                "quantity('1Gi').isGreaterThan(quantity('1G')) && quantity('500m').compareTo(quantity('0.5')) == 0",
                true,
            ),
            (
                "quantity('1').add(quantity('500m')) == quantity('1.5') && quantity('2').sub(1).asInteger() == 1",
                true,
            ),
            (
                "sign(quantity('-1m')) == -1 && isQuantity('1e3') && !isQuantity('1Kx')",
                true,
            ),
        ] {
            let expression = compile(source, Declarations::default()).unwrap();
            assert_eq!(
                expression.holds(&Activation::default()),
                Ok(expected),
                "{source}"
            );
        }
        for (source, message) in [
            (
                "ip('1.2.3') == ip('1.2.3')",
                "IP Address \"1.2.3\" parse error during conversion from string: ParseAddr(\"1.2.3\"): IPv4 address too short",
            ),
            (
                "cidr('10.0.0.0') == cidr('10.0.0.0')",
                "network address parse error during conversion from string: network address parse error during conversion from string: netip.ParsePrefix(\"10.0.0.0\"): no '/'",
            ),
            (
                "quantity('1Kx').sign() == 1",
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            ),
            (
                "quantity('1.5').asInteger() == 1",
                "cannot convert value to integer",
            ),
        ] {
            assert_evaluation_error(source, message);
        }
    }

    #[test]
    fn the_semver_url_and_format_libraries_answer_as_cel_go_s_do() {
        let object = json!({"data": {
            "u": "http://user:pass@[::1]:80/path%20with%2Fslash?x=1&x=2&d+e=f"}});
        for (source, expected) in [
            (
                "semver('1.0.0-alpha.1').compareTo(semver('1.0.0-alpha.beta'))",
                json!(-1),
            ),
            ("semver('1.0.0+a') == semver('1.0.0+b')", json!(true)),
            ("semver('v01.02', true).minor()", json!(2)),
            ("isSemver('1.2') || !isSemver('v1', true)", json!(false)),
            (
                "[url(object.data.u).getHost(), url(object.data.u).getHostname(), \
                url(object.data.u).getPort(), url(object.data.u).getEscapedPath()]",
                json!(["[::1]:80", "::1", "80", "/path%20with%2Fslash"]),
            ),
            (
                "url(object.data.u).getQuery()",
                json!({"x": ["1", "2"], "d e": ["f"]}),
            ),
            ("isURL('/a?b') && !isURL('a/b')", json!(true)),
            (
                "format.dns1123Label().validate('a.b').value()",
                json!(["must not contain dots"]),
            ),
            (
                "format.dns1123LabelPrefix().validate('ab-').hasValue() \
                || format.named('nope').hasValue()",
                json!(false),
            ),
            (
                "format.named('uuid') == optional.of(format.uuid()) \
                && format.uuid().validate('x').value() == ['does not match the UUID format']",
                json!(true),
            ),
        ] {
            let expression = compile(source, Declarations::default()).unwrap();
            let value = expression.evaluate(&with_object(object.clone())).unwrap();
            assert_eq!(json_of(&value), expected, "{source}");
        }
        for (source, message) in [
            (
                "url('http://host:port/').getHost() == ''",
                "URL parse error during conversion from string: parse \"http://host:port/\": invalid port \":port\" after host",
            ),
            (
                "url('example.com').getHost() == ''",
                "URL parse error during conversion from string: parse \"example.com\": invalid URI for request",
            ),
            (
                "semver('01.2.3').major() == 1",
                "Major number must not contain leading zeroes \"01\"",
            ),
            (
                "semver('1.2').major() == 1",
                "No Major.Minor.Patch elements found",
            ),
        ] {
            assert_evaluation_error(source, message);
        }
    }

    #[test]
    fn the_authorizer_builds_a_check_and_answers_it() {
        let check: Arc<AuthorizerCheck> =
            Arc::new(|account, attributes| super::super::auth::Decision {
                allowed: account.is_none()
                    && attributes.verb == "get"
                    && (attributes.resource == "pods" || attributes.path == "/healthz"),
                reason: String::new(),
            });
        let activation = Activation {
            authorizer: Some(Authorizer {
                check,
                request_resource: super::super::auth::Attributes {
                    resource: "pods".into(),
                    ..Default::default()
                },
            }),
            ..Activation::default()
        };
        let declared = Declarations {
            authorizer: true,
            ..Declarations::default()
        };
        for (source, expected) in [
            (
                "authorizer.group('').resource('pods').namespace('a').check('get').allowed()",
                true,
            ),
            (
                "authorizer.group('').resource('pods').check('delete').allowed()",
                false,
            ),
            ("authorizer.requestResource.check('get').allowed()", true),
            ("authorizer.path('/healthz').check('get').allowed()", true),
            (
                "authorizer.serviceAccount('a', 'b').group('').resource('pods').check('get').allowed()",
                false,
            ),
        ] {
            let expression = compile(source, declared).unwrap();
            assert_eq!(expression.holds(&activation), Ok(expected), "{source}");
        }
    }

    #[test]
    fn a_syntax_error_is_worded_as_cel_go_words_it() {
        let Err(CelError::Compile(message)) = compile("object.", Declarations::default()) else {
            panic!("compiled");
        };
        assert!(message.starts_with("ERROR: <input>:1:8: "), "{message}");
        assert!(message.ends_with("\n | object.\n | .......^"), "{message}");
    }

    #[test]
    fn an_undeclared_variable_is_a_compile_error_but_a_bound_one_is_not() {
        assert_eq!(
            compile("params.x == 1", Declarations::default()).unwrap_err(),
            CelError::Compile(
                "ERROR: <input>:1:1: undeclared reference to 'params' (in container '')\n | params.x == 1\n | ^".into()
            )
        );
        let declared = Declarations {
            params: true,
            ..Declarations::default()
        };
        assert!(compile("params.x == 1", declared).is_ok());
        assert!(compile("[1].all(item, item > 0)", Declarations::default()).is_ok());
    }

    #[test]
    fn a_field_the_typed_variables_lack_is_a_compile_error() {
        let declared = Declarations::default();
        assert_eq!(
            compile("request.operation == 'CREATE' && has(request.userInfo.nick)", declared)
                .unwrap_err(),
            CelError::Compile(
                "ERROR: <input>:1:37: undefined field 'nick'\n | request.operation == 'CREATE' && has(request.userInfo.nick)\n | ....................................^".into()
            )
        );
        assert_eq!(
            compile("namespaceObject.metadata.uid == ''", declared).unwrap_err(),
            CelError::Compile(
                "ERROR: <input>:1:25: undefined field 'uid'\n | namespaceObject.metadata.uid == ''\n | ........................^".into()
            )
        );
        assert!(compile("request.userInfo.extra.anything == ['x']", declared).is_ok());
        assert!(compile("[1].all(request, request.foo == 1)", declared).is_ok());
    }

    #[test]
    fn a_missing_key_is_cel_go_s_error() {
        let expression = compile("object.data.missing == 'x'", Declarations::default()).unwrap();
        assert_eq!(
            expression
                .holds(&with_object(json!({"data": {}})))
                .unwrap_err()
                .to_string(),
            "expression 'object.data.missing == 'x'' resulted in error: no such key: missing"
        );
    }
}
