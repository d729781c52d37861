//! C's `strftime` for the date fields chat templates print (`strftime_now("%d %b %Y")`), in
//! UTC and the C locale. Any other conversion is refused by name rather than printed wrong.

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// A UTC instant broken into the fields `format` prints.
struct Civil {
    year: i64,
    /// 1–12.
    month: u32,
    /// 1–31.
    day: u32,
    /// 0 is Sunday.
    weekday: usize,
    hour: i64,
    minute: i64,
    second: i64,
}

impl Civil {
    /// The proleptic Gregorian date of a day count from 1970-01-01 (Howard Hinnant's
    /// `civil_from_days`).
    fn of(unix_seconds: i64) -> Civil {
        let days = unix_seconds.div_euclid(86_400);
        let secs = unix_seconds.rem_euclid(86_400);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        Civil {
            year,
            month,
            day,
            // 1970-01-01 was a Thursday.
            weekday: (days + 4).rem_euclid(7) as usize,
            hour: secs / 3600,
            minute: secs / 60 % 60,
            second: secs % 60,
        }
    }
}

/// `fmt` with its conversions of the instant `unix_seconds` (UTC) filled in: `%Y %y %m %d %e
/// %B %b %h %A %a %H %I %M %S %p %F %%`.
pub fn format(fmt: &str, unix_seconds: i64) -> Result<String, String> {
    let c = Civil::of(unix_seconds);
    let month = MONTHS[c.month as usize - 1];
    let day = DAYS[c.weekday];
    let mut out = String::with_capacity(fmt.len() + 8);
    let mut chars = fmt.chars();
    while let Some(ch) = chars.next() {
        if ch != '%' {
            out.push(ch);
            continue;
        }
        match chars.next() {
            Some('Y') => out += &c.year.to_string(),
            Some('y') => out += &format!("{:02}", c.year.rem_euclid(100)),
            Some('m') => out += &format!("{:02}", c.month),
            Some('d') => out += &format!("{:02}", c.day),
            Some('e') => out += &format!("{:2}", c.day),
            Some('B') => out += month,
            Some('b' | 'h') => out += &month[..3],
            Some('A') => out += day,
            Some('a') => out += &day[..3],
            Some('H') => out += &format!("{:02}", c.hour),
            Some('I') => out += &format!("{:02}", (c.hour + 11) % 12 + 1),
            Some('M') => out += &format!("{:02}", c.minute),
            Some('S') => out += &format!("{:02}", c.second),
            Some('p') => out += if c.hour < 12 { "AM" } else { "PM" },
            Some('F') => out += &format!("{}-{:02}-{:02}", c.year, c.month, c.day),
            Some('%') => out.push('%'),
            Some(other) => {
                return Err(format!(
                    "strftime_now: %{other} is not a conversion trine formats (it formats \
                     %Y %y %m %d %e %B %b %h %A %a %H %I %M %S %p %F %%)"
                ))
            }
            None => return Err("strftime_now: the format ends in a lone %".to_string()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::format;

    /// Instants whose dates are known: `date -u -d @SECONDS`.
    #[test]
    fn dates_match_gnu_date() {
        // 2024-03-05 07:08:09 UTC, a Tuesday.
        assert_eq!(
            format(
                "%Y-%m-%d %H:%M:%S %a %A %b %B %y %e %I%p %F %%",
                1_709_622_489
            )
            .unwrap(),
            "2024-03-05 07:08:09 Tue Tuesday Mar March 24  5 07AM 2024-03-05 %"
        );
        // A leap day, and the epoch.
        assert_eq!(format("%d %b %Y", 1_709_164_800).unwrap(), "29 Feb 2024");
        assert_eq!(
            format("%A %d %B %Y %H", 0).unwrap(),
            "Thursday 01 January 1970 00"
        );
        // 1969-12-31 23:59:59, before the epoch.
        assert_eq!(format("%F %H:%M:%S", -1).unwrap(), "1969-12-31 23:59:59");
    }

    #[test]
    fn an_unknown_conversion_is_refused_by_name() {
        let e = format("%d %Q", 0).unwrap_err();
        assert!(e.contains("%Q"), "{e}");
        assert!(format("100%", 0).is_err());
    }
}
