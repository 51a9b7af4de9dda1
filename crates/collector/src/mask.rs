//! Secrets on command lines: one job, to hide the values of the arguments whose names say they
//! are secret before a command line is stored or served (`/api/vms`, downloads, the UI).
//!
//! An argument is secret when its name contains one of the mask's words (case-insensitive;
//! default: password, secret, token, key, credential). Forms recognised, one word of the command
//! line each:
//! - `NAME=VALUE` (`-Dapp.password=x`, `--db-token=x`, `PASSWORD=x`): the value, to the end of
//!   the word, becomes `***`;
//! - agent options `-agentpath:LIB=k=v,k=v`, `-agentlib:NAME=...`, `-javaagent:JAR=...`: each
//!   `k=v` whose key is secret; the agent's own `token=` always is, whatever the words;
//! - `--password VALUE` (a dash-led name without `=`): the next word.
//!
//! A word that merely contains a secret word without being a name (a main class `KeyServer`, a
//! path) is left alone.

/// The words that make an argument's name secret (`serve --mask`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mask {
    /// Lower case, none empty.
    words: Vec<String>,
}

/// What a masked value reads as.
const HIDDEN: &str = "***";

/// The default words of [`Mask`].
pub const DEFAULT_MASK: &str = "password,secret,token,key,credential";

impl Default for Mask {
    fn default() -> Mask {
        Mask::parse(DEFAULT_MASK)
    }
}

impl Mask {
    /// Comma-separated words; an empty list masks only the agent's `token=`.
    pub fn parse(list: &str) -> Mask {
        Mask {
            words: list
                .split(',')
                .map(|w| w.trim().to_lowercase())
                .filter(|w| !w.is_empty())
                .collect(),
        }
    }

    /// The words, for messages.
    pub fn words(&self) -> &[String] {
        &self.words
    }

    fn is_secret(&self, name: &str) -> bool {
        let name = name.to_lowercase();
        self.words.iter().any(|w| name.contains(w.as_str()))
    }

    /// `command` with every secret argument's value replaced by `***`; the spacing between
    /// words is kept.
    pub fn apply(&self, command: &str) -> String {
        let mut out = String::with_capacity(command.len());
        let mut hide_next = false;
        let mut rest = command;
        while !rest.is_empty() {
            let blank = rest.len() - rest.trim_start().len();
            out.push_str(&rest[..blank]);
            rest = &rest[blank..];
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            let word = &rest[..end];
            rest = &rest[end..];
            if word.is_empty() {
                break;
            }
            if std::mem::take(&mut hide_next) {
                out.push_str(HIDDEN);
                continue;
            }
            if let Some(options) = agent_options(word) {
                out.push_str(&word[..word.len() - options.len()]);
                out.push_str(&self.agent_options(options));
            } else if let Some((name, value)) = word.split_once('=')
                && is_name(name)
            {
                out.push_str(name);
                out.push('=');
                let secret = self.is_secret(name) || name.eq_ignore_ascii_case("token");
                out.push_str(if secret && !value.is_empty() {
                    HIDDEN
                } else {
                    value
                });
            } else {
                // `--password VALUE`: a dash-led name whose value is the next word.
                hide_next = word.starts_with('-') && is_name(word) && self.is_secret(word);
                out.push_str(word);
            }
        }
        out
    }

    /// `k=v,k=v` with the secret values hidden.
    fn agent_options(&self, options: &str) -> String {
        options
            .split(',')
            .map(|pair| match pair.split_once('=') {
                Some((k, v)) if !v.is_empty() && (k == "token" || self.is_secret(k)) => {
                    format!("{k}={HIDDEN}")
                }
                _ => pair.to_string(),
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Whether `s` can be an argument's name: `-Dapp.password`, `--db-token`, `API_KEY` (not a path
/// or a value that happens to hold a secret word).
fn is_name(s: &str) -> bool {
    let bare = s.trim_start_matches('-');
    !bare.is_empty()
        && bare
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// The options part of an agent argument (after `LIB=`), if `word` is one.
fn agent_options(word: &str) -> Option<&str> {
    ["-agentpath:", "-agentlib:", "-javaagent:"]
        .iter()
        .find(|p| word.starts_with(*p))
        .and_then(|_| word.split_once('=').map(|(_, options)| options))
}

/// `command` with the default mask applied.
pub fn mask_tokens(command: &str) -> String {
    Mask::default().apply(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_masked_in_commands() {
        assert_eq!(
            mask_tokens("java -agentpath:/a.so=server=h:1,token=s3cret,refresh=1s -jar x.jar"),
            "java -agentpath:/a.so=server=h:1,token=***,refresh=1s -jar x.jar"
        );
        assert_eq!(mask_tokens("a token=x token=y"), "a token=*** token=***");
        assert_eq!(mask_tokens("token= x"), "token= x");
        assert_eq!(mask_tokens("no secrets"), "no secrets");
        assert_eq!(mask_tokens("-Dtoken=abc"), "-Dtoken=***");
    }

    #[test]
    fn secret_names_are_masked_case_insensitively() {
        let m = Mask::default();
        assert_eq!(
            m.apply("java -Dapp.password=x -Xmx1g -Dapp.name=shop Main"),
            "java -Dapp.password=*** -Xmx1g -Dapp.name=shop Main"
        );
        assert_eq!(
            m.apply("java -DDB_PASSWORD=a,b -Daws.SecretAccessKey=q -Dapi.Key=k -Dcredentials=c"),
            "java -DDB_PASSWORD=*** -Daws.SecretAccessKey=*** -Dapi.Key=*** -Dcredentials=***"
        );
        assert_eq!(
            m.apply("java -jar app.jar --db-password hunter2 --port 80 --api-token=t"),
            "java -jar app.jar --db-password *** --port 80 --api-token=***"
        );
        // Names only: a class or a path with a secret word in it stays.
        assert_eq!(
            m.apply("java -cp /opt/keys/lib.jar com.acme.KeyServer 8080"),
            "java -cp /opt/keys/lib.jar com.acme.KeyServer 8080"
        );
        // Spacing kept, a trailing dash-led secret name with nothing after it is fine.
        assert_eq!(m.apply("  java  --password"), "  java  --password");
        // Not names: an agent path without options, a path with `=` in it.
        assert_eq!(
            m.apply("java -agentpath:/opt/keys/a.so /data/key=1/x Main"),
            "java -agentpath:/opt/keys/a.so /data/key=1/x Main"
        );
    }

    #[test]
    fn agent_options_are_masked_pair_by_pair() {
        let m = Mask::default();
        assert_eq!(
            m.apply("java -javaagent:/o/keyagent.jar=endpoint=h,apiKey=zz,x=1 -jar a.jar"),
            "java -javaagent:/o/keyagent.jar=endpoint=h,apiKey=***,x=1 -jar a.jar"
        );
        assert_eq!(
            m.apply("java -agentlib:jdwp=transport=dt_socket,server=y Main"),
            "java -agentlib:jdwp=transport=dt_socket,server=y Main"
        );
    }

    #[test]
    fn the_words_are_configurable() {
        let m = Mask::parse(" Pin , ");
        assert_eq!(m.words(), ["pin"]);
        assert_eq!(
            m.apply("java -Dcard.PIN=1234 -Dapp.password=x"),
            "java -Dcard.PIN=*** -Dapp.password=x"
        );
        // Nothing configured: the agent's own token is still hidden.
        let none = Mask::parse("");
        assert_eq!(
            none.apply("java -agentpath:/a.so=token=t -Dpassword=p"),
            "java -agentpath:/a.so=token=*** -Dpassword=p"
        );
    }
}
