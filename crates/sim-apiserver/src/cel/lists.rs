//! The `indexOf` and `lastIndexOf` of Kubernetes' lists library
//! (k8s.io/apiserver/pkg/cel/library/lists.go) for lists: the index of the first or last
//! element equal to the argument, or -1. (The strings extension's `indexOf` of strings is
//! the crate's.)

use cel::common::types::{CelInt, DYN_TYPE, LIST_TYPE};
use cel::common::value::CowVal;
use cel::{DeclarationError, Env, ExecutionError};

/// The index of the first (`last`: the last) element of `args[0]` equal to `args[1]`.
fn position<'b, 'v>(
    function: &str,
    args: &[CowVal<'b, 'v>],
    last: bool,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list, item] = args else {
        return Err(ExecutionError::invalid_argument_count(2, args.len()));
    };
    let iterable = list.as_iterable().ok_or_else(|| {
        ExecutionError::no_such_member_overload(function, vec![list.get_type().name().into()])
    })?;
    let mut elements = iterable.iter();
    let (mut index, mut found) = (0i64, -1i64);
    while let Some(element) = elements.next() {
        if element.equals(item.as_ref()) {
            found = index;
            if !last {
                break;
            }
        }
        index += 1;
    }
    let index = found;
    Ok(CowVal::owned(CelInt::from(index)))
}

fn index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    position("indexOf", &args, false)
}

fn last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    position("lastIndexOf", &args, true)
}

/// Registers the overloads of lists.
pub(super) fn extension(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload(
        "indexOf",
        "list_a_index_of_int",
        LIST_TYPE,
        vec![DYN_TYPE],
        index_of,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "list_a_last_index_of_int",
        LIST_TYPE,
        vec![DYN_TYPE],
        last_index_of,
    )?;
    Ok(())
}
