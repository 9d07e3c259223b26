//! The warnings a request's answer carries (`Warning: 299 - "…"` headers), as kube-apiserver's
//! warning recorder collects them: from admission webhooks, ValidatingAdmissionPolicies with a
//! `Warn` action, and CRD validation rules whose failure an update ratchets.

use std::cell::RefCell;

use hyper::header::{HeaderValue, WARNING};

tokio::task_local! {
    /// The warnings of the request being served.
    static WARNINGS: RefCell<Vec<String>>;
}

/// Runs `serve` collecting the warnings it gives, returned with its answer.
pub fn collect_warnings<R>(serve: impl FnOnce() -> R) -> (R, Vec<String>) {
    WARNINGS.sync_scope(RefCell::new(Vec::new()), || {
        let answer = serve();
        let warnings = WARNINGS.with(|w| w.take());
        (answer, warnings)
    })
}

/// Adds a warning to the answer of the request being served (once: the recorder keeps one of
/// each); outside a request it is dropped.
pub(crate) fn add_warning(text: &str) {
    let _ = WARNINGS.try_with(|w| {
        let mut w = w.borrow_mut();
        // The recorder keeps one of each warning.
        if !w.iter().any(|x| x == text) {
            w.push(text.to_string());
        }
    });
}

/// Adds one `Warning: 299 - "…"` header per warning, as kube-apiserver's recorder writes them.
pub fn add_warning_headers<B>(response: &mut hyper::Response<B>, warnings: &[String]) {
    for text in warnings {
        let mut quoted = String::with_capacity(text.len() + 2);
        quoted.push('"');
        for c in text.chars() {
            if c == '"' || c == '\\' {
                quoted.push('\\');
            }
            quoted.push(c);
        }
        quoted.push('"');
        if let Ok(value) = HeaderValue::from_str(&format!("299 - {quoted}")) {
            response.headers_mut().append(WARNING, value);
        }
    }
}
