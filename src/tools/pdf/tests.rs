//! PDFs written here, byte by byte with true cross-reference offsets, and
//! hostile ones that must end in a clear error within the caps.

use super::*;
use std::time::Duration;

fn z(data: &[u8]) -> Vec<u8> {
    miniz_oxide::deflate::compress_to_vec_zlib(data, 6)
}

/// A stream object's body.
fn st(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut v = format!("<< /Length {} {dict} >>\nstream\n", data.len()).into_bytes();
    v.extend_from_slice(data);
    v.extend_from_slice(b"\nendstream");
    v
}

/// Objects 1..=n (1 is the catalog) with a classic xref table.
fn pdf(objs: &[Vec<u8>]) -> Vec<u8> {
    pdf_with(objs, "")
}

fn pdf_with(objs: &[Vec<u8>], trailer_extra: &str) -> Vec<u8> {
    let mut out = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n".to_vec();
    let mut offs = Vec::new();
    for (i, body) in objs.iter().enumerate() {
        offs.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    out.extend_from_slice(format!("xref\n0 {}\n0000000000 65535 f \n", objs.len() + 1).as_bytes());
    for o in offs {
        out.extend_from_slice(format!("{o:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R {trailer_extra} >>\nstartxref\n{xref}\n%%EOF\n",
            objs.len() + 1
        )
        .as_bytes(),
    );
    out
}

/// Objects numbered from 1: `packed[i]` true puts object i+1 in an object
/// stream. A cross-reference stream (W [1 4 2], PNG Up predictor) lists
/// them.
fn pdf_xref_stream(objs: &[(Vec<u8>, bool)]) -> Vec<u8> {
    pdf_xref_stream_claiming(objs, None)
}

/// `claim`: the /N the object stream states, whatever it holds.
fn pdf_xref_stream_claiming(objs: &[(Vec<u8>, bool)], claim: Option<&str>) -> Vec<u8> {
    let n = objs.len() as u32;
    let (stm, xrs) = (n + 1, n + 2);
    let mut out = b"%PDF-1.5\n%\xe2\xe3\xcf\xd3\n".to_vec();
    let mut rows: Vec<(u8, u32, u16)> = vec![(0, 0, 65535); (xrs + 1) as usize];
    let (mut head, mut body) = (String::new(), Vec::new());
    let mut idx = 0u16;
    for (i, (o, packed)) in objs.iter().enumerate() {
        let num = i as u32 + 1;
        if *packed {
            head.push_str(&format!("{num} {} ", body.len()));
            body.extend_from_slice(o);
            body.push(b' ');
            rows[num as usize] = (2, stm, idx);
            idx += 1;
        } else {
            rows[num as usize] = (1, out.len() as u32, 0);
            out.extend_from_slice(format!("{num} 0 obj\n").as_bytes());
            out.extend_from_slice(o);
            out.extend_from_slice(b"\nendobj\n");
        }
    }
    let mut data = head.clone().into_bytes();
    data.extend_from_slice(&body);
    rows[stm as usize] = (1, out.len() as u32, 0);
    out.extend_from_slice(format!("{stm} 0 obj\n").as_bytes());
    out.extend_from_slice(&st(
        &format!(
            "/Type /ObjStm /N {} /First {} /Filter /FlateDecode",
            claim.map_or(idx.to_string(), str::to_string),
            head.len()
        ),
        &z(&data),
    ));
    out.extend_from_slice(b"\nendobj\n");
    rows[xrs as usize] = (1, out.len() as u32, 0);
    let mut raw = Vec::new();
    let mut prev = [0u8; 7];
    for (t, a, b) in &rows {
        let mut row = [0u8; 7];
        row[0] = *t;
        row[1..5].copy_from_slice(&a.to_be_bytes());
        row[5..].copy_from_slice(&b.to_be_bytes());
        raw.push(2);
        raw.extend(row.iter().zip(prev).map(|(c, p)| c.wrapping_sub(p)));
        prev = row;
    }
    let xref = out.len();
    out.extend_from_slice(format!("{xrs} 0 obj\n").as_bytes());
    out.extend_from_slice(&st(
        &format!(
            "/Type /XRef /Size {} /W [1 4 2] /Root 1 0 R /Filter /FlateDecode \
             /DecodeParms << /Predictor 12 /Columns 7 >>",
            xrs + 1
        ),
        &z(&raw),
    ));
    out.extend_from_slice(format!("\nendobj\nstartxref\n{xref}\n%%EOF\n").as_bytes());
    out
}

fn b(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

const HELV: &str = "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>";

/// Catalog, pages, one page with `content` and font F1 = object 4.
fn one_page(content: Vec<u8>, font: &str) -> Vec<Vec<u8>> {
    vec![
        b("<< /Type /Catalog /Pages 2 0 R >>"),
        b("<< /Type /Pages /Kids [3 0 R] /Count 1 >>"),
        b("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] \
           /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>"),
        b(font),
        content,
    ]
}

fn want(first: usize, last: Option<usize>) -> Want<'static> {
    Want {
        first,
        last,
        max_chars: 20_000,
        max_bytes: 64 * 1024,
        deadline: Instant::now() + Duration::from_secs(20),
        control: None,
    }
}

fn text(pdf: &[u8]) -> String {
    match extract(pdf, &want(1, None)) {
        Ok((t, _)) => t,
        Err(e) => panic!("extract failed: {e}"),
    }
}

fn err(pdf: &[u8]) -> String {
    match extract(pdf, &want(1, None)) {
        Ok((t, _)) => panic!("expected an error, got: {t}"),
        Err(e) => e,
    }
}

const LINES: &[u8] = b"BT /F1 12 Tf 72 700 Td (Hello, world) Tj 0 -14 Td (Second \\(line\\)) Tj ET";

#[test]
fn uncompressed_text_with_lines() {
    let p = pdf(&one_page(st("", LINES), HELV));
    assert_eq!(text(&p), "--- page 1 ---\nHello, world\nSecond (line)\n");
}

#[test]
fn flate_compressed_content_and_array_of_streams() {
    let mut objs = one_page(st("/Filter /FlateDecode", &z(LINES)), HELV);
    assert_eq!(
        text(&pdf(&objs)),
        "--- page 1 ---\nHello, world\nSecond (line)\n"
    );
    // /Contents as an array of two streams, the second one ASCIIHex.
    objs[2] = b(
        "<< /Type /Page /Parent 2 0 R /Resources << /Font << /F1 4 0 R >> >> \
                 /Contents [5 0 R 6 0 R] >>",
    );
    objs[4] = st(
        "/Filter /FlateDecode",
        &z(b"BT /F1 12 Tf 72 700 Td (One) Tj ET"),
    );
    objs.push(st(
        "/Filter /ASCIIHexDecode",
        b"4254202f463120313220546620373220363830205464202854776f2920546a204554>",
    ));
    assert_eq!(text(&pdf(&objs)), "--- page 1 ---\nOne\nTwo\n");
}

#[test]
fn xref_stream_and_object_stream() {
    let objs = one_page(st("/Filter /FlateDecode", &z(LINES)), HELV);
    // Catalog, pages, page and font packed; the content stream direct.
    let packed: Vec<(Vec<u8>, bool)> = objs
        .into_iter()
        .enumerate()
        .map(|(i, o)| (o, i < 4))
        .collect();
    let p = pdf_xref_stream(&packed);
    assert!(memchr::memmem::find(&p, b"trailer").is_none());
    assert_eq!(text(&p), "--- page 1 ---\nHello, world\nSecond (line)\n");
}

/// A Type0 font whose two-byte codes only the /ToUnicode map explains.
#[test]
fn to_unicode_cmap_with_bfrange_and_two_byte_codes() {
    let cmap = b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap\n\
        1 begincodespacerange <0000> <FFFF> endcodespacerange\n\
        2 beginbfchar <0003> <0020> <0010> <00E9> endbfchar\n\
        2 beginbfrange <0020> <0039> <0061> <0040> <0041> [<0021> <00660069>] endbfrange\n\
        endcmap CMapName currentdict /CMap defineresource pop end end";
    let font = "<< /Type /Font /Subtype /Type0 /BaseFont /X /Encoding /Identity-H \
                /DescendantFonts [7 0 R] /ToUnicode 6 0 R >>";
    // "caf" é " " "fi" "!" ; codes: c=0x22 a=0x20 f=0x25.
    let content = b"BT /F1 10 Tf 50 500 Td <0022002000250010> Tj <0003> Tj <00410040> Tj ET";
    let mut objs = one_page(st("", content), font);
    objs.push(st("", cmap));
    objs.push(b(
        "<< /Type /Font /Subtype /CIDFontType2 /BaseFont /X /DW 500 \
                 /W [32 [500 500] 37 37 300] >>",
    ));
    assert_eq!(text(&pdf(&objs)), "--- page 1 ---\ncafé fi!\n");
}

#[test]
fn tj_kerning_gaps_become_spaces_and_quote_operators_break_lines() {
    let content = b"BT /F1 10 Tf 12 TL 50 500 Td [(Hel) -20 (lo) -400 (World)] TJ \
        (next) ' 2 0 (third) \" T* (fourth) Tj ET";
    let p = pdf(&one_page(st("", content), HELV));
    assert_eq!(
        text(&p),
        "--- page 1 ---\nHello World\nnext\nthird\nfourth\n"
    );
}

#[test]
fn words_placed_apart_on_one_line_get_a_space() {
    // Widths known: "ab" is 1000 units = 10 points wide at size 10.
    let font = "<< /Type /Font /Subtype /TrueType /BaseFont /A /FirstChar 97 /LastChar 98 \
                /Widths [500 500] /Encoding /WinAnsiEncoding >>";
    let content = b"BT /F1 10 Tf 1 0 0 1 50 500 Tm (ab) Tj 1 0 0 1 60 500 Tm (ab) Tj \
        1 0 0 1 75 500 Tm (ab) Tj ET";
    let p = pdf(&one_page(st("", content), font));
    assert_eq!(text(&p), "--- page 1 ---\nabab ab\n");
}

#[test]
fn encodings_and_differences() {
    let font = "<< /Type /Font /Subtype /Type1 /BaseFont /Times-Roman \
                /Encoding << /BaseEncoding /WinAnsiEncoding /Differences [65 /eacute /fi] >> >>";
    let content = b"BT /F1 10 Tf 50 500 Td (AB \\223q\\224 \\200) Tj ET";
    let p = pdf(&one_page(st("", content), font));
    assert_eq!(text(&p), "--- page 1 ---\né\u{FB01} “q” €\n");
    // StandardEncoding (a Type1 font's default): 0x27 is a right quote.
    let p = pdf(&one_page(
        st("", b"BT /F1 10 Tf 50 500 Td (it's) Tj ET"),
        HELV,
    ));
    assert_eq!(text(&p), "--- page 1 ---\nit\u{2019}s\n");
}

/// Pages under a nested /Pages node inherit /Resources; one page has its
/// own; a page range picks pages in tree order.
fn multi_page() -> Vec<u8> {
    let page = |c: u32, res: &str| b(&format!("<< /Type /Page {res} /Contents {c} 0 R >>"));
    let body = |s: &str| st("", format!("BT /F1 12 Tf 72 700 Td ({s}) Tj ET").as_bytes());
    pdf(&[
        b("<< /Type /Catalog /Pages 2 0 R >>"),
        b("<< /Type /Pages /Kids [3 0 R 4 0 R 5 0 R] /Count 4 \
           /Resources << /Font << /F1 9 0 R >> >> >>"),
        page(10, ""),
        b("<< /Type /Pages /Kids [6 0 R 7 0 R] /Count 2 >>"),
        page(13, "/Resources << /Font << /F1 8 0 R >> >>"),
        page(11, ""),
        page(12, ""),
        b("<< /Type /Font /Subtype /Type1 /BaseFont /Courier \
           /Encoding << /Differences [97 /b] >> >>"),
        b(HELV),
        body("first page"),
        body("second page"),
        body("third page"),
        body("a fourth"),
    ])
}

#[test]
fn multi_page_inherited_resources_and_ranges() {
    let p = multi_page();
    assert_eq!(
        text(&p),
        "--- page 1 ---\nfirst page\n--- page 2 ---\nsecond page\n--- page 3 ---\nthird page\n\
         --- page 4 ---\nb fourth\n"
    );
    let (t, meta) = extract(&p, &want(2, Some(3))).unwrap();
    assert_eq!(
        t,
        "--- page 2 ---\nsecond page\n--- page 3 ---\nthird page\n\
         …[pages 2–3 of 4 shown; 1 more; ask with first_page=4]\n"
    );
    assert_eq!(meta["pages"], 4);
    assert_eq!(meta["last_page_shown"], 3);
    assert_eq!(meta["truncated"], false);
    let e = extract(&p, &want(5, None)).unwrap_err();
    assert_eq!(e, "\"first_page\" is 5, past the last page (4)");
    // max_chars cuts inside a page and says where to go on.
    let w = Want {
        max_chars: 15,
        ..want(1, None)
    };
    let (t, meta) = extract(&p, &w).unwrap();
    assert_eq!(
        t,
        "--- page 1 ---\nfirst page\n--- page 2 ---\nsecon\n\
         …[truncated in page 2 at max_chars=15; 2 pages after it; ask with first_page=3]\n"
    );
    assert_eq!(meta["truncated"], true);
    assert_eq!(meta["chars"], 15);
}

#[test]
fn form_xobjects_and_inline_images() {
    let content = b"q 1 0 0 1 0 0 cm BI /W 2 /H 1 /BPC 8 /CS /G ID \x00EI\xff EI Q \
        BT /F1 10 Tf 50 600 Td (before) Tj ET /X1 Do";
    let objs = vec![
        b("<< /Type /Catalog /Pages 2 0 R >>"),
        b("<< /Type /Pages /Kids [3 0 R] /Count 1 >>"),
        b(
            "<< /Type /Page /Parent 2 0 R /Resources << /Font << /F1 4 0 R >> \
           /XObject << /X1 6 0 R >> >> /Contents 5 0 R >>",
        ),
        b(HELV),
        st("", content),
        st(
            "/Type /XObject /Subtype /Form /BBox [0 0 100 100] /Matrix [1 0 0 1 0 -100]",
            b"BT /F1 10 Tf 50 600 Td (in the form) Tj ET",
        ),
    ];
    assert_eq!(text(&pdf(&objs)), "--- page 1 ---\nbefore\nin the form\n");
}

#[test]
fn a_broken_xref_table_falls_back_to_scanning() {
    let mut p = pdf(&one_page(st("", LINES), HELV));
    // Every offset off by 7: the objects are found by their headers.
    let at = p.windows(4).position(|w| w == b"xref").unwrap();
    let tail: Vec<String> = String::from_utf8(p[at..].to_vec())
        .unwrap()
        .lines()
        .map(|l| match l.strip_suffix(" 00000 n ") {
            Some(o) => format!("{:010} 00000 n ", o.parse::<u64>().unwrap() + 7),
            None => l.to_string(),
        })
        .collect();
    assert_eq!(tail[3], "0000000022 00000 n ", "{tail:?}");
    p.truncate(at);
    p.extend_from_slice(tail.join("\n").as_bytes());
    assert_eq!(text(&p), "--- page 1 ---\nHello, world\nSecond (line)\n");
    // No xref at all, no startxref: still readable.
    let p = pdf(&one_page(st("", LINES), HELV));
    let at = p.windows(4).position(|w| w == b"xref").unwrap();
    let mut cut = p[..at].to_vec();
    cut.extend_from_slice(b"trailer << /Root 1 0 R >>\n%%EOF\n");
    assert_eq!(text(&cut), "--- page 1 ---\nHello, world\nSecond (line)\n");
}

#[test]
fn encrypted_pdfs_are_refused_by_name() {
    let p = pdf_with(
        &one_page(st("", LINES), HELV),
        "/Encrypt << /Filter /Standard /V 2 >>",
    );
    assert_eq!(err(&p), "encrypted PDFs are not supported");
}

// Hostile input: each ends in a clear error (or what text is readable),
// quickly and within the caps.

#[test]
fn garbage_and_every_truncation_of_a_valid_file() {
    assert_eq!(
        err(b"hello, this is not a pdf"),
        "not a PDF file (no %PDF- header at its start)"
    );
    let mut noise = b"%PDF-1.7\n".to_vec();
    let mut x: u32 = 12345;
    for _ in 0..20_000 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        noise.push((x >> 16) as u8);
    }
    let e = err(&noise);
    assert!(!e.is_empty());
    let p = pdf_xref_stream(
        &one_page(st("/Filter /FlateDecode", &z(LINES)), HELV)
            .into_iter()
            .enumerate()
            .map(|(i, o)| (o, i % 2 == 0))
            .collect::<Vec<_>>(),
    );
    let classic = multi_page();
    let started = Instant::now();
    for file in [&p, &classic] {
        for n in 0..file.len() {
            // Either text or an error; never a panic or a hang.
            let _ = extract(&file[..n], &want(1, None));
        }
    }
    assert!(started.elapsed() < Duration::from_secs(20));
    // Cut inside the content stream: a clear error.
    let p = pdf(&one_page(st("", LINES), HELV));
    let at = memchr::memmem::find(&p, b"Second").unwrap();
    let e = err(&p[..at]);
    assert!(
        e.contains("page 1 is unreadable") || e.contains("no end"),
        "{e}"
    );
}

#[test]
fn a_flate_bomb_stops_at_the_stream_cap() {
    let bomb = z(&vec![b' '; MAX_STREAM + 1024]);
    assert!(bomb.len() < 100_000);
    let p = pdf(&one_page(st("/Filter /FlateDecode", &bomb), HELV));
    let e = err(&p);
    assert_eq!(
        e,
        "page 1 is unreadable: a stream inflates to more than 16 MiB; refused"
    );
}

#[test]
fn many_streams_stop_at_the_total_cap() {
    // 8 pages of 10 MiB each: under the per-stream cap, over the total.
    let big = z(&vec![b' '; 10 << 20]);
    let mut objs = vec![
        b("<< /Type /Catalog /Pages 2 0 R >>"),
        b("<< /Type /Pages /Kids [3 0 R 3 0 R 3 0 R 3 0 R 3 0 R 3 0 R 3 0 R 3 0 R] /Count 8 >>"),
    ];
    // One page object listed eight times is a repeat, not a cycle: refused
    // all the same, since a page tree names each node once.
    objs.push(b("<< /Type /Page /Contents 4 0 R >>"));
    objs.push(st("/Filter /FlateDecode", &big));
    let e = err(&pdf(&objs));
    assert!(e.contains("refers back to object 3"), "{e}");
    let kids: Vec<String> = (0..8).map(|i| format!("{} 0 R", 3 + i)).collect();
    objs[1] = b(&format!(
        "<< /Type /Pages /Kids [{}] /Count 8 >>",
        kids.join(" ")
    ));
    objs.truncate(2);
    for _ in 0..8 {
        objs.push(b("<< /Type /Page /Contents 11 0 R >>"));
    }
    objs.push(st("/Filter /FlateDecode", &big));
    let (t, meta) = extract(&pdf(&objs), &want(1, None)).unwrap();
    assert!(
        t.ends_with(
            "--- page 6 ---\n[no text on this page]\n…[stopped at page 7: the streams decode to \
             more than 64 MiB in all; stopped; pages 1–6 are shown]\n"
        ),
        "{t}"
    );
    assert_eq!(meta["truncated"], true);
}

#[test]
fn kids_cycles_and_deep_trees_are_refused() {
    let p = pdf(&[
        b("<< /Type /Catalog /Pages 2 0 R >>"),
        b("<< /Type /Pages /Kids [3 0 R] /Count 1 >>"),
        b("<< /Type /Pages /Kids [2 0 R] /Count 1 >>"),
    ]);
    assert_eq!(err(&p), "the page tree refers back to object 2 (a cycle)");
    // 100 levels of /Pages, no cycle.
    let mut objs = vec![b("<< /Type /Catalog /Pages 2 0 R >>")];
    for i in 2..102 {
        objs.push(b(&format!(
            "<< /Type /Pages /Kids [{} 0 R] /Count 1 >>",
            i + 1
        )));
    }
    objs.push(b("<< /Type /Page >>"));
    assert_eq!(
        err(&pdf(&objs)),
        "the page tree is more than 64 levels deep"
    );
}

#[test]
fn deep_nesting_and_reference_cycles_are_refused() {
    let deep = format!(
        "<< /Type /Catalog /Pages 2 0 R /X {}1{} >>",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    let mut objs = one_page(st("", LINES), HELV);
    objs[0] = b(&deep);
    let e = err(&pdf(&objs));
    assert!(e.contains("nested more than 64 deep"), "{e}");
    // /Contents → 6 → 7 → 6 …
    let mut objs = one_page(b("6 0 R"), HELV);
    objs.push(b("7 0 R"));
    objs.push(b("6 0 R"));
    let e = err(&pdf(&objs));
    assert!(e.contains("chain of references is too long"), "{e}");
    // A stream whose /Length is itself.
    let mut objs = one_page(Vec::new(), HELV);
    objs[4] = b("<< /Length 5 0 R >>\nstream\nBT /F1 9 Tf (self) Tj ET\nendstream");
    assert_eq!(text(&pdf(&objs)), "--- page 1 ---\nself\n");
}

#[test]
fn huge_declared_lengths_and_counts_are_not_believed() {
    let mut objs = one_page(Vec::new(), HELV);
    objs[4] = b(&format!(
        "<< /Length 99999999999999 >>\nstream\n{}\nendstream",
        String::from_utf8_lossy(LINES)
    ));
    assert_eq!(
        text(&pdf(&objs)),
        "--- page 1 ---\nHello, world\nSecond (line)\n"
    );
    // An xref subsection claiming a billion entries: scanned instead.
    let p = pdf(&one_page(st("", LINES), HELV));
    let at = memchr::memmem::find(&p, b"xref\n0 6\n").unwrap();
    let mut lie = p[..at].to_vec();
    lie.extend_from_slice(b"xref\n0 1000000000\n");
    lie.extend_from_slice(&p[at + 9..]);
    assert_eq!(text(&lie), "--- page 1 ---\nHello, world\nSecond (line)\n");
    // An object stream claiming a billion objects.
    let objs: Vec<(Vec<u8>, bool)> = one_page(st("", LINES), HELV)
        .into_iter()
        .map(|o| (o, true))
        .collect();
    let p = pdf_xref_stream_claiming(&objs, Some("1000000000"));
    assert_eq!(err(&p), "object stream 6 has a bad /N or /First");
}

#[test]
fn the_deadline_stops_the_call() {
    let p = multi_page();
    let w = Want {
        deadline: Instant::now(),
        ..want(1, None)
    };
    let e = extract(&p, &w).unwrap_err();
    assert_eq!(e, "the call's time limit was reached (tool_timeout_secs)");
}

#[test]
fn one_stream_named_many_times_counts_each_time() {
    // 5 MiB uncompressed, listed 20 times: 100 MiB decoded, over the total.
    let big = vec![b' '; 5 << 20];
    let refs = vec!["5 0 R"; 20].join(" ");
    let mut objs = one_page(st("", &big), HELV);
    objs[2] = b(&format!("<< /Type /Page /Contents [{refs}] >>"));
    let e = err(&pdf(&objs));
    assert_eq!(
        e,
        "stopped at page 1: the streams decode to more than 64 MiB in all; stopped"
    );
}

#[test]
fn a_form_that_draws_itself_stops_at_the_nesting_cap() {
    let objs = vec![
        b("<< /Type /Catalog /Pages 2 0 R >>"),
        b("<< /Type /Pages /Kids [3 0 R] /Count 1 >>"),
        b(
            "<< /Type /Page /Resources << /Font << /F1 4 0 R >> /XObject << /X1 5 0 R >> >> \
           /Contents 6 0 R >>",
        ),
        b(HELV),
        st(
            "/Type /XObject /Subtype /Form",
            b"BT /F1 10 Tf 0 0 Td (x) Tj ET /X1 Do /X1 Do",
        ),
        st("", b"/X1 Do"),
    ];
    let started = Instant::now();
    let t = text(&pdf(&objs));
    // Each of the 8 levels draws "x", then itself twice below: 2^8 - 1.
    let xs = t.matches('x').count();
    assert_eq!(xs, 255, "{t}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_cmap_of_many_ranges_and_a_long_string_stay_fast() {
    let mut cmap = String::from("1 begincodespacerange <0000> <FFFF> endcodespacerange\n");
    for chunk in 0..64 {
        cmap.push_str("100 beginbfrange\n");
        for i in 0..100 {
            let lo = (chunk * 100 + i) * 8;
            cmap.push_str(&format!("<{lo:04X}> <{:04X}> <0041>\n", lo + 7));
        }
        cmap.push_str("endbfrange\n");
    }
    let font = "<< /Type /Font /Subtype /Type0 /Encoding /Identity-H \
                /DescendantFonts [] /ToUnicode 6 0 R >>";
    let glyphs = "0008".repeat(500_000);
    let content = format!("BT /F1 10 Tf <{glyphs}> Tj ET");
    let mut objs = one_page(st("", content.as_bytes()), font);
    objs.push(st("", cmap.as_bytes()));
    let started = Instant::now();
    let (t, meta) = extract(&pdf(&objs), &want(1, None)).unwrap();
    assert!(t.starts_with("--- page 1 ---\nAAAA"), "{}", &t[..40]);
    assert_eq!(meta["chars"], 20_000);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn random_byte_flips_never_panic() {
    let cmap = b"1 begincodespacerange <0000> <FFFF> endcodespacerange \
        1 beginbfrange <0020> <0039> <0061> endbfrange 1 beginbfchar <0003> <0020> endbfchar";
    let font = "<< /Type /Font /Subtype /Type0 /Encoding /Identity-H \
                /DescendantFonts [<< /W [32 [500 600] 40 50 300] >>] /ToUnicode 6 0 R >>";
    let mut objs = one_page(
        st(
            "/Filter /FlateDecode",
            &z(b"BT /F1 10 Tf 50 500 Td <00220020> Tj [<0025> -300 <0026>] TJ 0 -12 Td <0030> Tj ET"),
        ),
        font,
    );
    objs.push(st("/Filter /FlateDecode", &z(cmap)));
    let packed: Vec<(Vec<u8>, bool)> = objs
        .into_iter()
        .enumerate()
        .map(|(i, o)| (o, i != 4 && i != 5))
        .collect();
    let p = pdf_xref_stream(&packed);
    assert_eq!(text(&p), "--- page 1 ---\ncaf g\nq\n");
    let classic = multi_page();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for file in [&p, &classic] {
        for _ in 0..3000 {
            let mut f = file.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() % f.len() as u64) as usize;
                f[at] = next() as u8;
            }
            let _ = extract(&f, &want(1, None));
        }
    }
}
