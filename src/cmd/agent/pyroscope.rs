//! Grafana Pyroscope's push (`--pyroscope URL`): each window one `PushRequest`, a series per
//! group, posted as Grafana Alloy's `pyroscope.write` posts it (the connect protocol's unary
//! call over HTTP/1.1: `POST /push.v1.PusherService/Push`, `application/proto`).

use super::profiles::{GROUP_LABEL_KEYS, HostLabels, group_labels};
use super::sink::{Encoder, Window};
use crate::output::pyroscope::{self, PROFILE_NAME, PUSH_PATH, Series};
use crate::ship::Request;

/// The headers of the connect protocol's unary call, beside the backend's own.
pub(crate) const CONNECT_HEADERS: &[(&str, &str)] = &[("Connect-Protocol-Version", "1")];

pub(crate) struct PyroscopeEncoder {
    pub host: HostLabels,
    /// The request path: the URL's base path and the push procedure.
    pub path: String,
}

/// The request path of a Pyroscope URL's path: the procedure under it, unless the URL
/// names the procedure itself.
pub(crate) fn push_path(url_path: &str) -> String {
    if url_path.ends_with(PUSH_PATH) {
        url_path.to_string()
    } else {
        format!("{}{PUSH_PATH}", url_path.trim_end_matches('/'))
    }
}

impl Encoder for PyroscopeEncoder {
    fn encode(&self, w: &Window<'_>) -> Vec<Request> {
        if w.profiles.is_empty() {
            return Vec::new();
        }
        let series: Vec<Series<'_>> = w
            .profiles
            .iter()
            .map(|p| {
                // The window's counts are its own, never cumulative: Pyroscope must not
                // subtract the last window from them (`__delta__` false).
                let mut labels = vec![
                    ("__name__", PROFILE_NAME.to_string()),
                    ("__delta__", "false".to_string()),
                ];
                // The sample labels every sample of a group has alike: the series
                // carries them instead.
                labels.extend(
                    group_labels(&p.group, &self.host)
                        .into_iter()
                        .map(|(k, v)| (k, v.to_string())),
                );
                Series {
                    labels,
                    profile: &p.profile,
                    series_keys: GROUP_LABEL_KEYS,
                }
            })
            .collect();
        let req = pyroscope::request(&series);
        vec![Request {
            path: self.path.clone(),
            content_type: "application/proto".to_string(),
            body: prost::Message::encode_to_vec(&req),
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::push_path;

    #[test]
    fn the_procedure_goes_under_the_urls_path() {
        assert_eq!(push_path("/"), "/push.v1.PusherService/Push");
        assert_eq!(push_path(""), "/push.v1.PusherService/Push");
        assert_eq!(
            push_path("/pyroscope/"),
            "/pyroscope/push.v1.PusherService/Push"
        );
        assert_eq!(
            push_path("/p/push.v1.PusherService/Push"),
            "/p/push.v1.PusherService/Push"
        );
    }
}
