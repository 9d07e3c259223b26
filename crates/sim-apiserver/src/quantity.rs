//! Resource quantities as apimachinery's `resource.Quantity` reads, adds and prints them:
//! a decimal number with a format (a decimal SI suffix, a binary one, or a decimal
//! exponent) that its canonical string keeps.
//!
//! - Parsing accepts what `ParseQuantity` accepts (`^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$`
//!   with a known suffix) and refuses the rest with its errors; a value finer than a
//!   nano-unit is rounded up, away from zero, to one.
//! - The canonical string ([`std::fmt::Display`]) is `CanonicalizeBytes`' form: the largest
//!   suffix that leaves an integer (`1500` stays `1500`, `1000` is `1k`, `0.5` is `500m`); a
//!   binary quantity prints with the largest binary suffix that divides it, or as a decimal
//!   one when it is under 1024 in magnitude or not an integer; zero is `0`.
//! - A sum takes the format of its left operand, or of its right one when the left is zero,
//!   as `Quantity.Add` and `Quantity.Sub` do.
//!
//! # Caveats
//! Values are exact within an `i128` mantissa and a base-10 exponent: a quantity whose
//! mantissa at nano precision exceeds about 1.7e38 is refused as numerically unparseable,
//! where apimachinery keeps it in an arbitrary-precision decimal.

use std::cmp::Ordering;
use std::fmt;

/// The regular expression apimachinery's parse errors quote.
const SPLIT_RE: &str = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$";

/// Why a string is not a quantity, worded as apimachinery words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The string is not a number followed by a suffix.
    #[error("quantities must match the regular expression '{SPLIT_RE}'")]
    Format,
    /// The number could not be read (or is too large).
    #[error("unable to parse numeric part of quantity")]
    Numeric,
    /// The suffix is none of the known ones.
    #[error("unable to parse quantity's suffix")]
    Suffix,
}

/// How a quantity prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `n`, `u`, `m`, no suffix, `k`, `M`, `G`, `T`, `P`, `E`.
    DecimalSi,
    /// `Ki`, `Mi`, `Gi`, `Ti`, `Pi`, `Ei`.
    BinarySi,
    /// `e<exponent>`.
    DecimalExponent,
}

/// A quantity: `mantissa × 10^scale`, in a format.
#[derive(Debug, Clone, Copy)]
pub struct Quantity {
    mantissa: i128,
    scale: i32,
    format: Format,
}

/// The decimal SI suffixes and their powers of ten.
pub const DECIMAL_SUFFIXES: [(&str, i32); 10] = [
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("", 0),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];

/// The binary SI suffixes and their powers of two.
pub const BINARY_SUFFIXES: [(&str, u32); 6] = [
    ("Ki", 10),
    ("Mi", 20),
    ("Gi", 30),
    ("Ti", 40),
    ("Pi", 50),
    ("Ei", 60),
];

impl Quantity {
    /// A whole number in the decimal SI format (`resource.NewQuantity(n, DecimalSI)`).
    #[must_use]
    pub fn from_integer(value: i64) -> Self {
        Quantity {
            mantissa: i128::from(value),
            scale: 0,
            format: Format::DecimalSi,
        }
    }

    /// Zero, in the decimal SI format.
    #[must_use]
    pub fn zero() -> Self {
        Self::from_integer(0)
    }

    /// Parses `text` as `resource.ParseQuantity` does.
    ///
    /// # Errors
    /// As apimachinery refuses it.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let bytes = text.as_bytes();
        let mut i = 0;
        let negative = match bytes.first() {
            Some(b'-') => {
                i = 1;
                true
            }
            Some(b'+') => {
                i = 1;
                false
            }
            _ => false,
        };
        let whole_start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        let whole = &text[whole_start..i];
        let mut fraction = "";
        if i < bytes.len() && bytes[i] == b'.' {
            i += 1;
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            fraction = &text[start..i];
        }
        if whole.is_empty() && fraction.is_empty() {
            return Err(QuantityError::Format);
        }
        let suffix = &text[i..];
        if !suffix_is_well_formed(suffix) {
            return Err(QuantityError::Format);
        }
        let (format, exponent, binary) = interpret_suffix(suffix)?;
        let digits = format!("{whole}{fraction}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > 38 {
            return Err(QuantityError::Numeric);
        }
        let mut mantissa: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| QuantityError::Numeric)?
        };
        let mut scale =
            exponent - i32::try_from(fraction.len()).map_err(|_| QuantityError::Numeric)?;
        if binary > 0 {
            mantissa = mantissa
                .checked_mul(1i128 << binary)
                .ok_or(QuantityError::Numeric)?;
        }
        if negative {
            mantissa = -mantissa;
        }
        // Finer than nano: rounded up, away from zero.
        if scale < -9 {
            let divisor = 10i128
                .checked_pow(u32::try_from(-9 - scale).map_err(|_| QuantityError::Numeric)?)
                .ok_or(QuantityError::Numeric)?;
            let rest = mantissa % divisor;
            mantissa = mantissa / divisor + rest.signum();
            scale = -9;
        }
        let mut q = Quantity {
            mantissa,
            scale,
            format,
        };
        q.normalize();
        Ok(q)
    }

    /// Whether this is zero.
    #[must_use]
    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// Whether this is below zero.
    #[must_use]
    pub fn is_negative(&self) -> bool {
        self.mantissa < 0
    }
}

/// `self + other`, in `self`'s format (or `other`'s when `self` is zero).
impl std::ops::Add for Quantity {
    type Output = Quantity;

    fn add(self, other: Quantity) -> Quantity {
        let format = if self.is_zero() {
            other.format
        } else {
            self.format
        };
        let scale = self.scale.min(other.scale);
        let mut q = Quantity {
            mantissa: self.at_scale(scale).saturating_add(other.at_scale(scale)),
            scale,
            format,
        };
        q.normalize();
        q
    }
}

/// `self - other`, in `self`'s format (or `other`'s when `self` is zero).
impl std::ops::Sub for Quantity {
    type Output = Quantity;

    fn sub(self, other: Quantity) -> Quantity {
        self + Quantity {
            mantissa: -other.mantissa,
            ..other
        }
    }
}

impl Quantity {
    /// Rounded up to a whole number (`RoundUp(0)`), keeping the format.
    #[must_use]
    pub fn round_up_to_integer(self) -> Quantity {
        if self.scale >= 0 {
            return self;
        }
        let divisor = 10i128.saturating_pow(u32::try_from(-self.scale).unwrap_or(u32::MAX));
        let rest = self.mantissa % divisor;
        let mut q = Quantity {
            mantissa: self.mantissa / divisor + i128::from(rest > 0),
            scale: 0,
            format: self.format,
        };
        q.normalize();
        q
    }

    /// The value in thousandths, rounded up (`MilliValue`).
    #[must_use]
    pub fn milli_value(self) -> i128 {
        let thousandths = Quantity {
            scale: self.scale + 3,
            ..self
        };
        thousandths.round_up_to_integer().at_scale(0)
    }

    fn at_scale(&self, scale: i32) -> i128 {
        let shift = u32::try_from(self.scale - scale).unwrap_or(0);
        self.mantissa.saturating_mul(10i128.saturating_pow(shift))
    }

    /// Removes trailing decimal zeros of the mantissa into the scale.
    fn normalize(&mut self) {
        if self.mantissa == 0 {
            self.scale = 0;
            return;
        }
        while self.mantissa % 10 == 0 {
            self.mantissa /= 10;
            self.scale += 1;
        }
    }

    /// The value as a whole number, when it is one.
    fn as_integer(&self) -> Option<i128> {
        if self.scale < 0 {
            return None;
        }
        self.mantissa
            .checked_mul(10i128.checked_pow(u32::try_from(self.scale).ok()?)?)
    }
}

fn suffix_is_well_formed(suffix: &str) -> bool {
    let letters = suffix
        .find(|c: char| !"eEinumkKMGTP".contains(c))
        .unwrap_or(suffix.len());
    let rest = &suffix[letters..];
    let rest = rest.strip_prefix(['+', '-']).unwrap_or(rest);
    rest.bytes().all(|b| b.is_ascii_digit())
}

/// The format, decimal exponent and binary exponent (of 2) a suffix means.
fn interpret_suffix(suffix: &str) -> Result<(Format, i32, u32), QuantityError> {
    if let Some(&(_, e)) = DECIMAL_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
        return Ok((Format::DecimalSi, e, 0));
    }
    if let Some(&(_, b)) = BINARY_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
        return Ok((Format::BinarySi, 0, b));
    }
    if suffix.len() > 1 && (suffix.starts_with('e') || suffix.starts_with('E')) {
        let exponent: i32 = suffix[1..].parse().map_err(|_| QuantityError::Suffix)?;
        return Ok((Format::DecimalExponent, exponent, 0));
    }
    Err(QuantityError::Suffix)
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        let scale = self.scale.min(other.scale);
        self.at_scale(scale).cmp(&other.at_scale(scale))
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_zero() {
            return f.write_str("0");
        }
        let mut format = self.format;
        let integer = self.as_integer();
        if format == Format::BinarySi {
            match integer {
                Some(v) if v.abs() >= 1024 => {
                    let mut v = v;
                    let mut power: usize = 0;
                    while v % 1024 == 0 && power < 6 {
                        v /= 1024;
                        power += 1;
                    }
                    let suffix = power.checked_sub(1).map_or("", |p| BINARY_SUFFIXES[p].0);
                    return write!(f, "{v}{suffix}");
                }
                _ => format = Format::DecimalSi,
            }
        }
        // The exponent brought down to a multiple of 3.
        let (mut mantissa, mut exponent) = (self.mantissa, self.scale);
        match exponent.rem_euclid(3) {
            1 => {
                mantissa *= 10;
                exponent -= 1;
            }
            2 => {
                mantissa *= 100;
                exponent -= 2;
            }
            _ => {}
        }
        let suffix = match format {
            Format::DecimalSi => DECIMAL_SUFFIXES
                .iter()
                .find(|(_, e)| *e == exponent)
                .map(|(s, _)| (*s).to_string()),
            _ => None,
        };
        match suffix {
            Some(s) => write!(f, "{mantissa}{s}"),
            None if exponent == 0 => write!(f, "{mantissa}"),
            None => write!(f, "{mantissa}e{exponent}"),
        }
    }
}

impl serde::Serialize for Quantity {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(text: &str) -> String {
        Quantity::parse(text).unwrap().to_string()
    }

    #[test]
    fn quantities_print_in_apimachinerys_canonical_form() {
        for (input, want) in [
            ("0", "0"),
            ("0m", "0"),
            ("1", "1"),
            ("1500", "1500"),
            ("1000", "1k"),
            ("0.5", "500m"),
            ("100m", "100m"),
            ("1.5", "1500m"),
            ("2000m", "2"),
            ("1Ki", "1Ki"),
            ("1024", "1024"),
            ("1.5Ki", "1536"),
            ("1536Mi", "1536Mi"),
            ("2048Mi", "2Gi"),
            ("512Ki", "512Ki"),
            ("0.5Ki", "512"),
            ("1e3", "1e3"),
            ("1E", "1E"),
            ("12e6", "12e6"),
            ("1G", "1G"),
            ("1.5G", "1500M"),
            ("-1", "-1"),
            ("+3k", "3k"),
            (".5", "500m"),
            ("5.", "5"),
            ("1n", "1n"),
            ("0.1n", "1n"),
        ] {
            assert_eq!(canonical(input), want, "{input}");
        }
    }

    #[test]
    fn bad_quantities_are_refused_with_apimachinerys_errors() {
        assert_eq!(Quantity::parse(""), Err(QuantityError::Format));
        assert_eq!(Quantity::parse("abc"), Err(QuantityError::Format));
        assert_eq!(Quantity::parse("1.2.3"), Err(QuantityError::Format));
        assert_eq!(Quantity::parse("1Qi"), Err(QuantityError::Format));
        assert_eq!(Quantity::parse("1Ki1"), Err(QuantityError::Suffix));
        assert_eq!(Quantity::parse("1e"), Err(QuantityError::Suffix));
        assert_eq!(
            QuantityError::Format.to_string(),
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        );
    }

    #[test]
    fn sums_keep_the_left_format_unless_it_is_zero_and_compare_by_value() {
        let q = |s| Quantity::parse(s).unwrap();
        assert_eq!((q("1Gi") + q("1Gi")).to_string(), "2Gi");
        assert_eq!((q("500m") + q("1")).to_string(), "1500m");
        assert_eq!((Quantity::zero() + q("1Gi")).to_string(), "1Gi");
        assert_eq!((q("1") + q("1Ki")).to_string(), "1025");
        assert_eq!((q("3") - q("1")).to_string(), "2");
        assert_eq!((Quantity::zero() - q("1")).to_string(), "-1");
        assert!(q("1") > q("999m"));
        assert_eq!(q("1k"), q("1000"));
        assert_eq!(q("1Ki"), q("1024"));
        assert_eq!(q("1500m").round_up_to_integer().to_string(), "2");
        assert_eq!(q("1Gi").round_up_to_integer().to_string(), "1Gi");
        assert_eq!(q("1.5").milli_value(), 1500);
        assert_eq!(q("1n").milli_value(), 1);
    }
}
