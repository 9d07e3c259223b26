//! Kubernetes' quantity library (k8s.io/apiserver/pkg/cel/library/quantity.go):
//! `quantity(string)`, `isQuantity` and `sign(quantity)` (a function, not a method, as the
//! library declares it), a quantity's `isInteger`, `asInteger`, `asApproximateFloat`, `add`
//! and `sub` (of a quantity or an int), `compareTo`, `isGreaterThan` and `isLessThan`.
//!
//! A quantity keeps the form apimachinery's `resource.Quantity` keeps it in, which the
//! functions' answers depend on: a small decimal is an int64 scaled by a power of ten (`1.5`
//! is 15e-1, and never an integer, as `1000m` is not), anything else an exact decimal rounded
//! up to nano units (which `asInteger` refuses too).

use cel::common::types::{CelBool, CelDouble, CelInt, CelString};
use cel::{DeclarationError, Env, ExecutionError};

use crate::quantity::{BINARY_SUFFIXES, DECIMAL_SUFFIXES, QuantityError};

/// How a quantity's value is held: `value × 10^exponent`.
#[derive(Debug, Clone, Copy)]
enum Amount {
    /// apimachinery's int64Amount.
    Small { value: i64, exponent: i32 },
    /// apimachinery's inf.Dec (within i128 here).
    Decimal { unscaled: i128, exponent: i32 },
}

/// A `kubernetes.Quantity`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Quantity(Amount);

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.compare(other) == std::cmp::Ordering::Equal
    }
}

super::opaque_value!(Quantity, "kubernetes.Quantity");

/// The parts of a quantity's text, as parseQuantityString splits them.
struct Parts<'a> {
    positive: bool,
    numerator: &'a str,
    denominator: &'a str,
    suffix: &'a str,
}

fn split(text: &str) -> Result<Parts<'_>, QuantityError> {
    let bytes = text.as_bytes();
    let end = bytes.len();
    let mut parts = Parts {
        positive: true,
        numerator: "0",
        denominator: "",
        suffix: "",
    };
    let mut pos = 0;
    match bytes.first() {
        Some(b'-') => {
            parts.positive = false;
            pos = 1;
        }
        Some(b'+') => pos = 1,
        _ => {}
    }
    while pos < end && bytes[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        return Ok(parts);
    }
    let start = pos;
    while pos < end && bytes[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos > start {
        parts.numerator = &text[start..pos];
    }
    if pos >= end {
        return Ok(parts);
    }
    if bytes[pos] == b'.' {
        pos += 1;
        let start = pos;
        while pos < end && bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        parts.denominator = &text[start..pos];
        if pos >= end {
            return Ok(parts);
        }
    }
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&bytes[pos]) {
        pos += 1;
    }
    if pos < end && matches!(bytes[pos], b'-' | b'+') {
        pos += 1;
    }
    while pos < end && bytes[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < end {
        return Err(QuantityError::Format);
    }
    parts.suffix = &text[suffix_start..];
    Ok(parts)
}

/// A suffix's base (10 or 2), exponent and whether it is binary.
fn suffix(suffix: &str) -> Option<(u32, i32, bool)> {
    if let Some((_, exponent)) = DECIMAL_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
        return Some((10, *exponent, false));
    }
    if let Some((_, exponent)) = BINARY_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
        return Some((2, i32::try_from(*exponent).unwrap_or(i32::MAX), true));
    }
    let rest = suffix.strip_prefix(['e', 'E'])?;
    if rest.is_empty() {
        return None;
    }
    let exponent: i64 = rest.parse().ok()?;
    Some((10, exponent as i32, false))
}

/// `10^n`, or `None` past i128.
fn power_of_ten(n: u32) -> Option<i128> {
    10i128.checked_pow(n)
}

/// `value × 10^shift`, or `None` past i128.
fn shifted(value: i128, shift: u32) -> Option<i128> {
    power_of_ten(shift).and_then(|p| value.checked_mul(p))
}

/// A quantity as `resource.ParseQuantity` reads it.
///
/// # Errors
/// The [`QuantityError`] apimachinery gives.
pub(super) fn parse(text: &str) -> Result<Quantity, QuantityError> {
    if text.is_empty() {
        return Err(QuantityError::Format);
    }
    if text == "0" {
        return Ok(Quantity(Amount::Small {
            value: 0,
            exponent: 0,
        }));
    }
    let parts = split(text)?;
    let (base, exponent, binary) = suffix(parts.suffix).ok_or(QuantityError::Suffix)?;
    let digits = parts.numerator.len() + parts.denominator.len();
    let (mut scale, mantissa, precision) = if binary {
        if parts.denominator.is_empty() {
            let guess =
                15 - parts.numerator.len() as i64 - ((exponent as f32) * 3.0 / 10.0) as i64 - 1;
            (0i64, 1i64 << exponent, guess)
        } else {
            (0, 1, -1)
        }
    } else {
        (i64::from(exponent), 1, 18 - digits as i64)
    };
    if precision >= 0 {
        scale -= parts.denominator.len() as i64;
        if scale >= -9 {
            let value: i64 = format!("{}{}", parts.numerator, parts.denominator)
                .parse()
                .map_err(|_| QuantityError::Numeric)?;
            if let Some(mut value) = value.checked_mul(mantissa) {
                if !parts.positive {
                    value = -value;
                }
                return Ok(Quantity(Amount::Small {
                    value,
                    exponent: scale as i32,
                }));
            }
        }
    }
    // Exact, rounded up to nano units (and a binary amount capped at the int64 maximum).
    let mut unscaled: i128 = format!("{}{}", parts.numerator, parts.denominator)
        .parse()
        .map_err(|_| QuantityError::Numeric)?;
    let mut exponent10 = -(parts.denominator.len() as i64);
    if base == 10 {
        exponent10 += i64::from(exponent);
    } else {
        unscaled = unscaled
            .checked_mul(1i128 << exponent)
            .ok_or(QuantityError::Numeric)?;
    }
    if unscaled != 0 {
        if exponent10 < -9 {
            let divisor = power_of_ten((-9 - exponent10) as u32);
            unscaled = match divisor {
                Some(divisor) => unscaled / divisor + i128::from(unscaled % divisor != 0),
                None => 1,
            };
        } else {
            unscaled = shifted(unscaled, (exponent10 + 9) as u32).ok_or(QuantityError::Numeric)?;
        }
        exponent10 = -9;
    }
    if binary && exponent10 <= 0 {
        let most = shifted(i128::from(i64::MAX), (-exponent10) as u32).unwrap_or(i128::MAX);
        if unscaled > most {
            unscaled = i128::from(i64::MAX);
            exponent10 = 0;
        }
    }
    if !parts.positive {
        unscaled = -unscaled;
    }
    Ok(Quantity(Amount::Decimal {
        unscaled,
        exponent: exponent10 as i32,
    }))
}

impl Amount {
    /// As an exact decimal (apimachinery's AsDec).
    fn decimal(self) -> (i128, i32) {
        match self {
            Amount::Small { value, exponent } => (i128::from(value), exponent),
            Amount::Decimal { unscaled, exponent } => (unscaled, exponent),
        }
    }
}

/// `a + b` of exact decimals, at the finer exponent; `None` past i128.
fn add_decimals((a, ea): (i128, i32), (b, eb): (i128, i32)) -> Option<(i128, i32)> {
    let exponent = ea.min(eb);
    let a = shifted(a, (ea - exponent) as u32)?;
    let b = shifted(b, (eb - exponent) as u32)?;
    Some((a.checked_add(b)?, exponent))
}

/// int64Amount.Add: `None` when the sum leaves int64.
fn add_small((a, ea): (i64, i32), (b, eb): (i64, i32)) -> Option<(i64, i32)> {
    if b == 0 {
        return Some((a, ea));
    }
    if a == 0 {
        return Some((b, eb));
    }
    let scale = |value: i64, by: i32| (0..by).try_fold(value, |value, _| value.checked_mul(10));
    match ea.cmp(&eb) {
        std::cmp::Ordering::Equal => Some((a.checked_add(b)?, ea)),
        std::cmp::Ordering::Greater => Some((scale(a, ea - eb)?.checked_add(b)?, eb)),
        std::cmp::Ordering::Less => Some((a.checked_add(scale(b, eb - ea)?)?, ea)),
    }
}

impl Quantity {
    fn sign(&self) -> i64 {
        self.0.decimal().0.signum() as i64
    }

    fn as_integer(&self) -> Option<i64> {
        match self.0 {
            Amount::Small { value, exponent: 0 } => Some(value),
            Amount::Small { value, exponent } if exponent > 0 => {
                (0..exponent).try_fold(value, |value, _| value.checked_mul(10))
            }
            _ => None,
        }
    }

    /// `AsApproximateFloat64`: the unscaled value times Go's `math.Pow10` of the exponent.
    fn approximate_float(&self) -> f64 {
        let (unscaled, exponent) = self.0.decimal();
        let base = unscaled as f64;
        if exponent == 0 {
            return base;
        }
        base * go_pow10(exponent)
    }

    fn compare(&self, other: &Quantity) -> std::cmp::Ordering {
        let (a, b) = (self.0.decimal(), other.0.decimal());
        if let Some((difference, _)) = add_decimals(a, (-b.0, b.1)) {
            return difference.cmp(&0);
        }
        // Too far apart to align: the signs, then the orders of magnitude decide.
        let magnitude = |(v, e): (i128, i32)| (v.unsigned_abs().ilog10() as i64) + i64::from(e);
        match a.0.signum().cmp(&b.0.signum()) {
            std::cmp::Ordering::Equal if a.0 > 0 => magnitude(a).cmp(&magnitude(b)),
            std::cmp::Ordering::Equal => magnitude(b).cmp(&magnitude(a)),
            order => order,
        }
    }

    /// `Quantity.Add` (`negate`: `Sub`).
    fn plus(&self, other: &Quantity, negate: bool) -> Result<Quantity, ExecutionError> {
        if let (
            Amount::Small {
                value: a,
                exponent: ea,
            },
            Amount::Small {
                value: b,
                exponent: eb,
            },
        ) = (self.0, other.0)
            && let Some(b) = if negate { b.checked_neg() } else { Some(b) }
            && let Some((value, exponent)) = add_small((a, ea), (b, eb))
        {
            return Ok(Quantity(Amount::Small { value, exponent }));
        }
        let (b, eb) = other.0.decimal();
        let b = if negate { -b } else { b };
        let (unscaled, exponent) = add_decimals(self.0.decimal(), (b, eb)).ok_or_else(|| {
            ExecutionError::function_error(
                if negate { "sub" } else { "add" },
                "quantity out of range",
            )
        })?;
        Ok(Quantity(Amount::Decimal { unscaled, exponent }))
    }
}

/// Go's `math.Pow10`: exact powers below 32, products of its tables beyond.
fn go_pow10(n: i32) -> f64 {
    let literal = |n: u32| format!("1e{n}").parse::<f64>().unwrap_or(f64::INFINITY);
    let negative_literal = |n: u32| format!("1e-{n}").parse::<f64>().unwrap_or(0.0);
    match n {
        0..=308 => literal((n as u32 / 32) * 32) * literal(n as u32 % 32),
        -323..=-1 => {
            let n = n.unsigned_abs();
            negative_literal((n / 32) * 32) / literal(n % 32)
        }
        n if n > 308 => f64::INFINITY,
        _ => 0.0,
    }
}

fn quantity(text: &CelString<'_>) -> Result<Quantity, ExecutionError> {
    parse(text.inner()).map_err(|e| ExecutionError::function_error("quantity", e))
}

fn is_quantity(text: &CelString<'_>) -> CelBool {
    parse(text.inner()).is_ok().into()
}

fn sign(q: &Quantity) -> CelInt {
    q.sign().into()
}

fn is_integer(q: &Quantity) -> CelBool {
    q.as_integer().is_some().into()
}

fn as_integer(q: &Quantity) -> Result<CelInt, ExecutionError> {
    q.as_integer().map(CelInt::from).ok_or_else(|| {
        ExecutionError::function_error("asInteger", "cannot convert value to integer")
    })
}

fn as_approximate_float(q: &Quantity) -> CelDouble {
    q.approximate_float().into()
}

fn compare_to(q: &Quantity, other: &Quantity) -> CelInt {
    (q.compare(other) as i64).into()
}

fn is_greater_than(q: &Quantity, other: &Quantity) -> CelBool {
    q.compare(other).is_gt().into()
}

fn is_less_than(q: &Quantity, other: &Quantity) -> CelBool {
    q.compare(other).is_lt().into()
}

fn add(q: &Quantity, other: &Quantity) -> Result<Quantity, ExecutionError> {
    q.plus(other, false)
}

fn sub(q: &Quantity, other: &Quantity) -> Result<Quantity, ExecutionError> {
    q.plus(other, true)
}

/// An int as `resource.NewQuantity` makes it.
fn of_int(value: &CelInt) -> Quantity {
    Quantity(Amount::Small {
        value: *value.inner(),
        exponent: 0,
    })
}

fn add_int(q: &Quantity, other: &CelInt) -> Result<Quantity, ExecutionError> {
    q.plus(&of_int(other), false)
}

fn sub_int(q: &Quantity, other: &CelInt) -> Result<Quantity, ExecutionError> {
    q.plus(&of_int(other), true)
}

/// Registers the library's overloads.
pub(super) fn extension(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_overload!(env, fn quantity: (CelString) -> Result<Quantity>, id = "string_to_quantity")?;
    cel::add_overload!(env, fn is_quantity: (CelString) -> CelBool, id = "is_quantity_string")?;
    cel::add_overload!(env, fn sign: (Quantity) -> CelInt, id = "quantity_sign")?;
    cel::add_member_overload!(env, fn is_integer: (Quantity) -> CelBool, id = "quantity_is_integer")?;
    cel::add_member_overload!(env, fn as_integer: (Quantity) -> Result<CelInt>, id = "quantity_get_integer")?;
    cel::add_member_overload!(env, fn as_approximate_float: (Quantity) -> CelDouble, id = "quantity_get_float")?;
    cel::add_member_overload!(env, fn compare_to: (Quantity, Quantity) -> CelInt, id = "quantity_compare_to")?;
    cel::add_member_overload!(env, fn is_greater_than: (Quantity, Quantity) -> CelBool, id = "quantity_is_greater_than")?;
    cel::add_member_overload!(env, fn is_less_than: (Quantity, Quantity) -> CelBool, id = "quantity_is_less_than")?;
    cel::add_member_overload!(env, fn add: (Quantity, Quantity) -> Result<Quantity>, id = "quantity_add")?;
    cel::add_member_overload!(env, fn add_int: (Quantity, CelInt) -> Result<Quantity>, name = "add", id = "quantity_add_int")?;
    cel::add_member_overload!(env, fn sub: (Quantity, Quantity) -> Result<Quantity>, id = "quantity_sub")?;
    cel::add_member_overload!(env, fn sub_int: (Quantity, CelInt) -> Result<Quantity>, name = "sub", id = "quantity_sub_int")?;
    Ok(())
}
