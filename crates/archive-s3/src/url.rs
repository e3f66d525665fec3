//! `s3://bucket/prefix?endpoint=http://host:port&region=name`: where an S3 archive is.

use lodestore_core::{Error, Result};

/// The URL scheme of S3 archives.
pub const S3_SCHEME: &str = "s3://";

/// A parsed S3 archive URL. It holds no credentials: those come from the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Url {
    pub bucket: String,
    /// Key prefix without leading or trailing slashes; empty for the bucket's root.
    pub prefix: String,
    /// The server, for S3-compatible stores other than AWS (`http://127.0.0.1:9000`).
    pub endpoint: Option<String>,
    pub region: Option<String>,
}

impl S3Url {
    pub fn parse(url: &str) -> Result<S3Url> {
        let bad = |why: String| Error::InvalidArgument(format!("archive URL {url:?}: {why}"));
        let rest = url.strip_prefix(S3_SCHEME).ok_or_else(|| {
            bad(format!(
                "not an S3 URL ({S3_SCHEME}bucket/prefix?endpoint=...)"
            ))
        })?;
        let (path, query) = match rest.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (rest, None),
        };
        let (bucket, prefix) = path.split_once('/').unwrap_or((path, ""));
        // S3's bucket naming rules: 3 to 63 of lower-case letters, digits, dots and hyphens.
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
        if !bucket_ok {
            return Err(bad(format!(
                "bucket {bucket:?}: 3 to 63 lower-case letters, digits, dots or hyphens"
            )));
        }
        let prefix = prefix.trim_matches('/');
        if prefix
            .split('/')
            .any(|part| part.is_empty() && !prefix.is_empty())
            || prefix.contains(|c: char| c.is_control() || c == '\\')
        {
            return Err(bad(format!(
                "prefix {prefix:?}: empty parts or control characters"
            )));
        }
        let mut parsed = S3Url {
            bucket: bucket.into(),
            prefix: prefix.into(),
            endpoint: None,
            region: None,
        };
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            match pair.split_once('=') {
                Some(("endpoint", value)) => {
                    if !(value.starts_with("http://") || value.starts_with("https://")) {
                        return Err(bad(format!(
                            "endpoint {value:?}: http://host:port or https://host:port"
                        )));
                    }
                    parsed.endpoint = Some(value.trim_end_matches('/').into());
                }
                Some(("region", value)) if !value.is_empty() => parsed.region = Some(value.into()),
                Some((key, _))
                    if key.to_ascii_lowercase().contains("secret")
                        || key.to_ascii_lowercase().contains("key")
                        || key.to_ascii_lowercase().contains("token") =>
                {
                    // Named without its value: that may be the secret itself.
                    return Err(Error::InvalidArgument(format!(
                        "archive URL: {key:?}: credentials never go in the URL; set \
                         AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment"
                    )));
                }
                _ => {
                    return Err(bad(format!(
                        "{pair:?}: the settings are endpoint=URL and region=NAME"
                    )))
                }
            }
        }
        Ok(parsed)
    }

    /// Whether plain HTTP is allowed: only when the endpoint says so itself.
    pub fn allows_http(&self) -> bool {
        self.endpoint
            .as_deref()
            .is_some_and(|e| e.starts_with("http://"))
    }

    /// `s3://bucket/prefix` and the endpoint when there is one: where the copies are, as the
    /// store records it (`Archive::location`) and as errors name the archive.
    pub fn location(&self) -> String {
        let mut location = self.bucket_url();
        if !self.prefix.is_empty() {
            location.push('/');
            location.push_str(&self.prefix);
        }
        if let Some(endpoint) = &self.endpoint {
            location.push_str("?endpoint=");
            location.push_str(endpoint);
        }
        location
    }

    /// `s3://bucket`.
    pub fn bucket_url(&self) -> String {
        format!("{S3_SCHEME}{}", self.bucket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_bad_ones_say_why_without_echoing_secrets() {
        let url =
            S3Url::parse("s3://snaps/stores/a/?endpoint=http://127.0.0.1:9000/&region=eu").unwrap();
        assert_eq!(url.bucket, "snaps");
        assert_eq!(url.prefix, "stores/a");
        assert_eq!(url.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert!(url.allows_http());
        assert_eq!(
            url.location(),
            "s3://snaps/stores/a?endpoint=http://127.0.0.1:9000"
        );
        let plain = S3Url::parse("s3://snaps").unwrap();
        assert_eq!((plain.prefix.as_str(), plain.allows_http()), ("", false));
        assert_eq!(plain.location(), "s3://snaps");
        for (url, says) in [
            ("lodestore://a:1", "not an S3 URL"),
            ("s3://", "bucket"),
            ("s3://Upper/p", "bucket"),
            ("s3://b_b/p", "bucket"),
            ("s3://bkt/a//b", "empty parts"),
            ("s3://bkt/p?endpoint=ftp://x", "endpoint"),
            ("s3://bkt/p?colour=red", "the settings are"),
        ] {
            let err = S3Url::parse(url).unwrap_err().to_string();
            assert!(err.contains(says), "{url}: {err}");
        }
        let err = S3Url::parse("s3://bkt/p?secret_access_key=hunter2")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("environment") && !err.contains("hunter2"),
            "{err}"
        );
    }
}
