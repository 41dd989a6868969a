//! Ticket bodies and comments are Markdown written by anyone with a ticket
//! token: rendered through pulldown-cmark with every raw HTML node shown as
//! text (never markup), links kept only to `http`, `https`, `mailto` and
//! same-site relative targets (a `javascript:` or `data:` link becomes
//! inert text), and images shown as their alt text (nothing is fetched, and
//! the page's policy would refuse another origin anyway).

use pulldown_cmark::{CowStr, Event, LinkType, Options, Parser, Tag, TagEnd, html};

/// The sanitized HTML of `source`.
pub fn render(source: &str) -> String {
    let mut options = Options::empty();
    options.insert(Options::ENABLE_TABLES);
    options.insert(Options::ENABLE_STRIKETHROUGH);
    options.insert(Options::ENABLE_TASKLISTS);
    let mut in_image = 0usize;
    let events = Parser::new_ext(source, options).filter_map(move |event| match event {
        Event::Html(raw) | Event::InlineHtml(raw) => Some(Event::Text(raw)),
        Event::Start(Tag::Image { .. }) => {
            in_image += 1;
            None
        }
        Event::End(TagEnd::Image) => {
            in_image = in_image.saturating_sub(1);
            None
        }
        Event::Start(Tag::Link {
            link_type,
            dest_url,
            title,
            id,
        }) => Some(Event::Start(Tag::Link {
            link_type: if safe_link(&dest_url) {
                link_type
            } else {
                LinkType::Inline
            },
            dest_url: if safe_link(&dest_url) {
                dest_url
            } else {
                CowStr::Borrowed("#")
            },
            title,
            id,
        })),
        other => Some(other),
    });
    let mut out = String::new();
    html::push_html(&mut out, events);
    out
}

/// A link target a page may carry: `http`, `https`, `mailto`, or relative
/// without a scheme. Control characters and whitespace browsers strip from
/// schemes (`java\tscript:`) are looked through.
fn safe_link(target: &str) -> bool {
    let squeezed: String = target
        .chars()
        .filter(|c| !c.is_whitespace() && !c.is_control())
        .collect::<String>()
        .to_ascii_lowercase();
    match squeezed.split_once(':') {
        None => true,
        Some((scheme, _)) if scheme.contains(['/', '?', '#']) => true,
        Some((scheme, _)) => matches!(scheme, "http" | "https" | "mailto"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_html_is_shown_as_text() {
        let out = render("hi <script>alert(1)</script>\n\n<img src=x onerror=alert(1)>");
        assert!(!out.contains("<script"), "{out}");
        assert!(!out.contains("<img"), "{out}");
        assert!(out.contains("&lt;script&gt;"), "{out}");
    }

    #[test]
    fn only_safe_links_survive() {
        for hostile in [
            "[x](javascript:alert(1))",
            "[x](JaVaScRiPt:alert(1))",
            "[x](java\tscript:alert(1))",
            "[x](data:text/html,<script>alert(1)</script>)",
            "[x](vbscript:msgbox)",
            "<javascript:alert(1)>",
        ] {
            let out = render(hostile);
            // Shown as text or as a link to nowhere, never as a live target.
            for href in out.split("href=\"").skip(1) {
                let target = &href[..href.find('"').unwrap_or(0)];
                assert_eq!(target, "#", "{hostile} -> {out}");
            }
            assert!(!out.contains("<script"), "{hostile} -> {out}");
        }
        assert_eq!(
            render("<java\u{0}script:alert(1)>")
                .matches("href=")
                .count(),
            render("<java\u{0}script:alert(1)>")
                .matches("href=\"#\"")
                .count()
        );
        assert!(render("[x](https://example.com/a)").contains("href=\"https://example.com/a\""));
        assert!(render("[x](/console/)").contains("href=\"/console/\""));
    }

    #[test]
    fn images_become_their_alt_text() {
        let out = render("![a cat](https://example.com/cat.png)");
        assert!(!out.contains("<img"), "{out}");
        assert!(out.contains("a cat"), "{out}");
    }

    #[test]
    fn markdown_still_renders() {
        assert!(render("**bold** and `code`").contains("<strong>bold</strong>"));
    }
}
