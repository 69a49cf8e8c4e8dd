//! The expressions an expectation's `value` may be: numbers, names, `+ - * /`, `^`, functions
//! and parentheses, parsed by a small recursive-descent parser.
//!
//! ```text
//! expr    := term (('+' | '-') term)*
//! term    := unary (('*' | '/') unary)*
//! unary   := '-' unary | power
//! power   := atom ('^' unary)?              right-associative: 2^3^2 = 2^9
//! atom    := number | name | name '(' expr (',' expr)* ')' | '(' expr ')'
//! number  := digits ['.' digits] [('e' | 'E') ['+' | '-'] digits]   (also '.5')
//! name    := (letter | '_' | '`' label '`' '.') (letter | digit | '_' | '.' | '[' digits ']' | '-' letter)*
//! ```
//!
//! Unary minus binds looser than `^`, as in mathematics: `-2^2` is `-4`. Inside a name, `-`
//! followed by a letter continues the name, so that labels such as `osgp-tau` can be named
//! (`osgp-tau.message_age.max`); write a subtraction of names with spaces: `n - s`. A label
//! with other characters (a digit after `-`, a space) is quoted with backticks:
//! `` `osgp-tau-2`.message_age.max ``.
//!
//! Functions: `min(a, b, …)`, `max(a, b, …)`, `sqrt(x)`, `log(x)` (natural), `exp(x)`, `abs(x)`,
//! `ceil(x)`, `floor(x)`.
//!
//! Errors carry the 1-based column (in characters) of the offending token in the expression.

use std::fmt;

/// A parsed expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A number.
    Num(f64),
    /// A name, resolved when the expression is evaluated; `column` is where it starts.
    Name {
        /// The name as written.
        name: String,
        /// 1-based column of its first character.
        column: usize,
    },
    /// `-x`.
    Neg(Box<Expr>),
    /// A binary operation.
    Bin(BinOp, Box<Expr>, Box<Expr>),
    /// A function call.
    Call(Func, Vec<Expr>),
}

/// A binary operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `^`
    Pow,
}

/// A function an expression may call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    /// The smallest argument (one or more).
    Min,
    /// The largest argument (one or more).
    Max,
    /// Square root.
    Sqrt,
    /// Natural logarithm.
    Log,
    /// `e^x`.
    Exp,
    /// Absolute value.
    Abs,
    /// Smallest integer at or above.
    Ceil,
    /// Largest integer at or below.
    Floor,
}

impl Func {
    /// Every function, with its name.
    pub const ALL: [(&'static str, Func); 8] = [
        ("min", Func::Min),
        ("max", Func::Max),
        ("sqrt", Func::Sqrt),
        ("log", Func::Log),
        ("exp", Func::Exp),
        ("abs", Func::Abs),
        ("ceil", Func::Ceil),
        ("floor", Func::Floor),
    ];

    fn by_name(name: &str) -> Option<Func> {
        Func::ALL.iter().find(|(n, _)| *n == name).map(|&(_, f)| f)
    }

    /// The function's name.
    pub fn name(self) -> &'static str {
        Func::ALL
            .iter()
            .find(|(_, f)| *f == self)
            .map_or("?", |(n, _)| n)
    }

    /// Whether it takes any number (one or more) of arguments, rather than exactly one.
    fn variadic(self) -> bool {
        matches!(self, Func::Min | Func::Max)
    }
}

/// An expression that does not parse: what is wrong, and at which column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based column (in characters) in the expression.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "column {}: {}", self.column, self.message)
    }
}

impl std::error::Error for ParseError {}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Num(f64),
    Name(String),
    Op(char),
    Open,
    Close,
    Comma,
    End,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Num(x) => format!("the number `{x}`"),
            Tok::Name(n) => format!("`{n}`"),
            Tok::Op(c) => format!("`{c}`"),
            Tok::Open => "`(`".into(),
            Tok::Close => "`)`".into(),
            Tok::Comma => "`,`".into(),
            Tok::End => "the end of the expression".into(),
        }
    }
}

/// Splits `text` into tokens with their 1-based columns.
fn lex(text: &str) -> Result<Vec<(Tok, usize)>, ParseError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let column = i + 1;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
            let (value, end) = lex_number(&chars, i)?;
            out.push((Tok::Num(value), column));
            i = end;
            continue;
        }
        if c.is_alphabetic() || c == '_' || c == '`' {
            let (name, end) = lex_name(&chars, i)?;
            out.push((Tok::Name(name), column));
            i = end;
            continue;
        }
        out.push((lex_symbol(c, column)?, column));
        i += 1;
    }
    out.push((Tok::End, chars.len() + 1));
    Ok(out)
}

/// A [`ParseError`] at `column`.
fn error(column: usize, message: String) -> ParseError {
    ParseError { column, message }
}

/// The position of the first character at or after `i` that is not an ASCII digit.
fn skip_digits(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() && chars[i].is_ascii_digit() {
        i += 1;
    }
    i
}

/// Reads the number that starts at `start` (digits, a fraction, an exponent): its value, and
/// the position just past it. A letter right after the number is an error (`2n` is not a
/// product); an `e` not followed by digits is not read as an exponent.
fn lex_number(chars: &[char], start: usize) -> Result<(f64, usize), ParseError> {
    let column = start + 1;
    let mut i = skip_digits(chars, start);
    if i < chars.len() && chars[i] == '.' {
        i = skip_digits(chars, i + 1);
    }
    if i < chars.len() && (chars[i] == 'e' || chars[i] == 'E') {
        let mut j = i + 1;
        if j < chars.len() && (chars[j] == '+' || chars[j] == '-') {
            j += 1;
        }
        if j < chars.len() && chars[j].is_ascii_digit() {
            i = skip_digits(chars, j);
        }
    }
    let literal: String = chars[start..i].iter().collect();
    let value: f64 = literal
        .parse()
        .map_err(|_| error(column, format!("`{literal}` is not a number")))?;
    if i < chars.len() && (chars[i].is_alphabetic() || chars[i] == '_') {
        return Err(error(
            i + 1,
            format!(
                "expected an operator after the number `{literal}` (write `{literal} * {}` for a product)",
                chars[i]
            ),
        ));
    }
    Ok((value, i))
}

/// Reads the name that starts at `start`: the name, and the position just past it. A name
/// that starts with a backtick is a quoted label, which must be followed by `.` and a metric;
/// the backticks are not part of the name.
fn lex_name(chars: &[char], start: usize) -> Result<(String, usize), ParseError> {
    let column = start + 1;
    let mut i = start;
    let mut name = String::new();
    let quoted = chars[start] == '`';
    if quoted {
        // A quoted label: any characters up to the closing backtick, then `.metric`.
        let Some(close) = chars[i + 1..].iter().position(|&d| d == '`') else {
            return Err(error(
                column,
                "a `` ` `` opens a quoted label that is never closed".into(),
            ));
        };
        name.extend(&chars[i + 1..i + 1 + close]);
        i += close + 2;
        if chars.get(i) != Some(&'.') {
            return Err(error(
                i + 1,
                "a quoted label is followed by `.` and a metric, as in `` `osgp-tau-2`.message_age.max ``".into(),
            ));
        }
    } else {
        i += 1;
    }
    let rest_start = if quoted { i } else { start };
    i = name_end(chars, i)?;
    name.extend(&chars[rest_start..i]);
    if name.ends_with('.') {
        return Err(error(
            start + 1,
            format!("`{name}` ends with `.`: a metric name is missing after it"),
        ));
    }
    Ok((name, i))
}

/// The position just past the rest of a name that continues at `i`: letters, digits, `_` and
/// `.`, a `-` followed by a letter, and a worker index in brackets (`[3]`).
fn name_end(chars: &[char], mut i: usize) -> Result<usize, ParseError> {
    while i < chars.len() {
        let d = chars[i];
        if d.is_alphanumeric() || d == '_' || d == '.' {
            i += 1;
        } else if d == '-' && chars.get(i + 1).is_some_and(|n| n.is_alphabetic()) {
            i += 2;
        } else if d == '[' {
            let j = skip_digits(chars, i + 1);
            if j == i + 1 || chars.get(j) != Some(&']') {
                return Err(error(
                    i + 1,
                    "`[` in a name must hold a worker index, as in `worker[3]`".into(),
                ));
            }
            i = j + 1;
        } else {
            break;
        }
    }
    Ok(i)
}

/// The token of the one-character symbol `c` (an operator, a parenthesis, a comma) at
/// `column`; any other character is an error, which names the ASCII character meant where
/// `c` looks like one (`−`, `×`, `·`).
fn lex_symbol(c: char, column: usize) -> Result<Tok, ParseError> {
    Ok(match c {
        '+' | '-' | '*' | '/' | '^' => Tok::Op(c),
        '(' => Tok::Open,
        ')' => Tok::Close,
        ',' => Tok::Comma,
        '−' => {
            return Err(error(
                column,
                "`−` (U+2212) is not an operator: write the ASCII minus `-`".into(),
            ));
        }
        '×' | '·' => {
            return Err(error(
                column,
                format!("`{c}` is not an operator: write `*` for a product"),
            ));
        }
        _ => {
            return Err(error(
                column,
                format!(
                    "unexpected character `{c}` (an expression has numbers, names, + - * / ^, functions and parentheses)"
                ),
            ));
        }
    })
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> &(Tok, usize) {
        &self.toks[self.at]
    }

    fn next(&mut self) -> (Tok, usize) {
        let t = self.toks[self.at].clone();
        if self.at + 1 < self.toks.len() {
            self.at += 1;
        }
        t
    }

    fn unexpected<T>(&self, wanted: &str) -> Result<T, ParseError> {
        let (tok, column) = self.peek();
        Err(ParseError {
            column: *column,
            message: format!("expected {wanted}, found {}", tok.describe()),
        })
    }

    fn expr(&mut self) -> Result<Expr, ParseError> {
        let mut lhs = self.term()?;
        loop {
            let op = match self.peek().0 {
                Tok::Op('+') => BinOp::Add,
                Tok::Op('-') => BinOp::Sub,
                _ => return Ok(lhs),
            };
            self.next();
            let rhs = self.term()?;
            lhs = Expr::Bin(op, Box::new(lhs), Box::new(rhs));
        }
    }

    fn term(&mut self) -> Result<Expr, ParseError> {
        let mut lhs = self.unary()?;
        loop {
            let op = match self.peek().0 {
                Tok::Op('*') => BinOp::Mul,
                Tok::Op('/') => BinOp::Div,
                _ => return Ok(lhs),
            };
            self.next();
            let rhs = self.unary()?;
            lhs = Expr::Bin(op, Box::new(lhs), Box::new(rhs));
        }
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        if self.peek().0 == Tok::Op('-') {
            self.next();
            return Ok(Expr::Neg(Box::new(self.unary()?)));
        }
        self.power()
    }

    fn power(&mut self) -> Result<Expr, ParseError> {
        let base = self.atom()?;
        if self.peek().0 == Tok::Op('^') {
            self.next();
            let exponent = self.unary()?;
            return Ok(Expr::Bin(BinOp::Pow, Box::new(base), Box::new(exponent)));
        }
        Ok(base)
    }

    fn atom(&mut self) -> Result<Expr, ParseError> {
        let (tok, column) = self.peek().clone();
        match tok {
            Tok::Num(x) => {
                self.next();
                Ok(Expr::Num(x))
            }
            Tok::Open => {
                self.next();
                let inner = self.expr()?;
                if self.peek().0 != Tok::Close {
                    return self.unexpected(&format!("`)` to close the `(` at column {column}"));
                }
                self.next();
                Ok(inner)
            }
            Tok::Name(name) => {
                self.next();
                if self.peek().0 != Tok::Open {
                    return Ok(Expr::Name { name, column });
                }
                let Some(func) = Func::by_name(&name) else {
                    return Err(ParseError {
                        column,
                        message: format!(
                            "unknown function `{name}` (the functions are {})",
                            Func::ALL.map(|(n, _)| n).join(", ")
                        ),
                    });
                };
                self.next();
                let mut args = vec![self.expr()?];
                while self.peek().0 == Tok::Comma {
                    self.next();
                    args.push(self.expr()?);
                }
                if self.peek().0 != Tok::Close {
                    return self.unexpected(&format!(
                        "`,` or `)` to close the call of `{name}` at column {column}"
                    ));
                }
                self.next();
                if !func.variadic() && args.len() != 1 {
                    return Err(ParseError {
                        column,
                        message: format!("`{name}` takes one argument, got {}", args.len()),
                    });
                }
                Ok(Expr::Call(func, args))
            }
            _ => self.unexpected("a number, a name or `(`"),
        }
    }
}

/// Parses an expression.
///
/// ```
/// use dasim_reports::claims::expr::parse;
/// let e = parse("2 * (n - 1) ^ 2").unwrap();
/// let value = e.eval(&mut |name: &str| match name {
///     "n" => Ok(4.0),
///     _ => Err(format!("unknown name {name}")),
/// });
/// assert_eq!(value, Ok(18.0));
/// assert_eq!(e.names(), [("n", 6)]);
/// assert_eq!(parse("2 *").unwrap_err().column, 4);
/// ```
pub fn parse(text: &str) -> Result<Expr, ParseError> {
    let toks = lex(text)?;
    if toks.len() == 1 {
        return Err(ParseError {
            column: 1,
            message: "the expression is empty".into(),
        });
    }
    let mut p = Parser { toks, at: 0 };
    let e = p.expr()?;
    match p.peek() {
        (Tok::End, _) => Ok(e),
        (Tok::Close, column) => Err(ParseError {
            column: *column,
            message: "`)` without a matching `(`".into(),
        }),
        (tok, column) => Err(ParseError {
            column: *column,
            message: format!("expected an operator (+ - * / ^), found {}", tok.describe()),
        }),
    }
}

impl Expr {
    /// Every name the expression reads, with its column, in order of appearance.
    pub fn names(&self) -> Vec<(&str, usize)> {
        let mut out = Vec::new();
        self.visit_names(&mut |n, c| out.push((n, c)));
        out
    }

    fn visit_names<'a>(&'a self, f: &mut impl FnMut(&'a str, usize)) {
        match self {
            Expr::Num(_) => {}
            Expr::Name { name, column } => f(name, *column),
            Expr::Neg(e) => e.visit_names(f),
            Expr::Bin(_, a, b) => {
                a.visit_names(f);
                b.visit_names(f);
            }
            Expr::Call(_, args) => args.iter().for_each(|a| a.visit_names(f)),
        }
    }

    /// Evaluates the expression, asking `value` for each name (an error from it is returned
    /// as is). Arithmetic follows IEEE 754: `1/0` is infinite, `sqrt(-1)` is NaN.
    pub fn eval<E>(&self, value: &mut impl FnMut(&str) -> Result<f64, E>) -> Result<f64, E> {
        Ok(match self {
            Expr::Num(x) => *x,
            Expr::Name { name, .. } => value(name)?,
            Expr::Neg(e) => -e.eval(value)?,
            Expr::Bin(op, a, b) => {
                let (a, b) = (a.eval(value)?, b.eval(value)?);
                match op {
                    BinOp::Add => a + b,
                    BinOp::Sub => a - b,
                    BinOp::Mul => a * b,
                    BinOp::Div => a / b,
                    BinOp::Pow => a.powf(b),
                }
            }
            Expr::Call(func, args) => {
                let mut xs = Vec::with_capacity(args.len());
                for a in args {
                    xs.push(a.eval(value)?);
                }
                match func {
                    Func::Min => xs.iter().copied().fold(f64::INFINITY, f64::min),
                    Func::Max => xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                    Func::Sqrt => xs[0].sqrt(),
                    Func::Log => xs[0].ln(),
                    Func::Exp => xs[0].exp(),
                    Func::Abs => xs[0].abs(),
                    Func::Ceil => xs[0].ceil(),
                    Func::Floor => xs[0].floor(),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(text: &str) -> f64 {
        parse(text)
            .unwrap()
            .eval(&mut |n: &str| match n {
                "n" => Ok::<_, ()>(8.0),
                "s" => Ok(4.0),
                "osgp-tau-2.message_age.max" | "osgp-tau.message_age.max" => Ok(2.0),
                _ => Err(()),
            })
            .unwrap()
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(eval("1 + 2 * 3"), 7.0);
        assert_eq!(eval("(1 + 2) * 3"), 9.0);
        assert_eq!(eval("2 ^ 3 ^ 2"), 512.0);
        assert_eq!(eval("-2 ^ 2"), -4.0);
        assert_eq!(eval("2 ^ -1"), 0.5);
        assert_eq!(eval("8 / 4 / 2"), 1.0);
        assert_eq!(eval("8 - 4 - 2"), 2.0);
        assert_eq!(eval("--3"), 3.0);
        assert_eq!(eval("1e-3 * 1E3 + .5"), 1.5);
        assert_eq!(eval("n - s"), 4.0);
        assert_eq!(eval("min(n, s, 2) + max(1, 3)"), 5.0);
        assert_eq!(
            eval("sqrt(16) + log(1) + abs(-2) + ceil(0.2) + floor(0.8)"),
            7.0
        );
        assert_eq!(eval("osgp-tau.message_age.max + 1"), 3.0);
        assert_eq!(eval("`osgp-tau-2`.message_age.max + 1"), 3.0);
    }

    #[test]
    fn names_and_their_columns() {
        let e = parse("2 * (n - 1) + worker[3].staleness.mean").unwrap();
        assert_eq!(e.names(), [("n", 6), ("worker[3].staleness.mean", 15)]);
        // `-` followed by a letter continues a name.
        assert_eq!(parse("n-s").unwrap().names(), [("n-s", 1)]);
        assert_eq!(parse("n -s").unwrap().names(), [("n", 1), ("s", 4)]);
    }

    #[test]
    fn errors_name_the_column() {
        for (text, column, needle) in [
            ("", 1, "empty"),
            ("2 *", 4, "expected a number, a name or `(`"),
            ("(n + 1", 7, "`)` to close the `(` at column 1"),
            ("n + 1)", 6, "without a matching"),
            ("2n", 2, "`2 * n`"),
            ("n s", 3, "expected an operator"),
            ("foo(1)", 1, "unknown function `foo`"),
            ("sqrt(1, 2)", 1, "takes one argument"),
            ("n # 2", 3, "unexpected character `#`"),
            ("n − 1", 3, "ASCII minus"),
            ("worker[x].steps", 7, "worker index"),
            ("allreduce.", 1, "ends with `.`"),
            ("max(1, 2", 9, "`,` or `)`"),
            ("`osgp", 1, "never closed"),
            ("`osgp` + 1", 7, "followed by `.`"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.column, column, "{text}: {e}");
            assert!(e.message.contains(needle), "{text}: {e}");
        }
    }
}
