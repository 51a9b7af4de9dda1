//! The heap report as text (for a terminal), JSON (for programs) and one self-contained HTML page
//! (histogram, expandable dominator tree, path to the GC root of any node; no network access).

use crate::analysis::{HeapReport, human};
use std::fmt::Write as _;

/// The text report: totals, leak suspects, top retainers with roots and paths, the histogram.
pub fn text(report: &HeapReport, top: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} objects, {} in all; reachable from GC roots: {} objects, {}",
        report.objects,
        human(report.bytes),
        report.reachable_objects,
        human(report.reachable_bytes)
    );
    let _ = writeln!(s, "object sizes: {}", report.layout);
    if !report.suspects.is_empty() {
        let _ = writeln!(s, "\nLeak suspects:");
        for x in &report.suspects {
            let _ = writeln!(s, "  {}", x.description);
        }
    }
    let _ = writeln!(s, "\nTop retainers (dominators):");
    let _ = writeln!(
        s,
        "  {:>12} {:>10}  {:<40} held by",
        "retained", "shallow", "class"
    );
    for d in &report.dominators {
        let _ = writeln!(
            s,
            "  {:>12} {:>10}  {:<40} {}",
            d.retained_bytes, d.shallow_bytes, d.class, d.root
        );
        if d.path.len() > 1 {
            let _ = writeln!(s, "  {:>12} {:>10}  path: {}", "", "", d.path.join(" -> "));
        }
        for site in &d.allocated_at {
            let _ = writeln!(
                s,
                "  {:>12} {:>10}  {} allocated at ({} {}): {}",
                "",
                "",
                site.class,
                site.bytes,
                site.metric,
                site.stack
                    .iter()
                    .rev()
                    .take(6)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(" <- ")
            );
        }
    }
    let _ = writeln!(s, "\nClass histogram (by retained bytes):");
    let _ = writeln!(
        s,
        "  {:>12} {:>14} {:>14}  class",
        "instances", "shallow", "retained"
    );
    for c in report.classes.iter().take(top) {
        let _ = writeln!(
            s,
            "  {:>12} {:>14} {:>14}  {}",
            c.instances, c.shallow_bytes, c.retained_bytes, c.name
        );
    }
    if report.classes.len() > top {
        let _ = writeln!(s, "  ... {} more classes", report.classes.len() - top);
    }
    s
}

/// The JSON report.
pub fn json(report: &HeapReport) -> String {
    serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// One self-contained HTML page.
pub fn html(report: &HeapReport) -> String {
    #[derive(serde::Serialize)]
    struct Data<'a> {
        report: &'a HeapReport,
        tree: &'a [crate::analysis::TreeNode],
    }
    let data = serde_json::to_string(&Data {
        report,
        tree: &report.tree,
    })
    .unwrap_or_else(|_| "{}".into())
    .replace("</", "<\\/");
    PAGE.replace("/*DATA*/null", &data)
}

const PAGE: &str = r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>jvmprof heap report</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.5em}
table{border-collapse:collapse}td,th{padding:2px 8px;text-align:right}td.n,th.n{text-align:left}
tr:nth-child(even){background:#f4f4f4}
ul.tree{list-style:none;padding-left:1.2em;margin:0}
.node{cursor:pointer;white-space:nowrap}.node .tw{display:inline-block;width:1em;color:#888}
.bar{display:inline-block;height:.7em;background:#d9822b;margin-right:6px;vertical-align:middle}
#path{background:#f7f7f7;border:1px solid #ddd;padding:8px;min-height:1.5em;font-family:monospace;white-space:pre-wrap}
.suspect{color:#a00}
</style></head><body>
<h1>Heap report</h1>
<p id="totals"></p>
<div id="suspects"></div>
<h2>Dominator tree</h2>
<p>Click a node to expand it and to see the shortest path from its GC root.</p>
<div id="path"></div>
<ul class="tree" id="tree"></ul>
<h2>Class histogram</h2>
<input id="filter" placeholder="filter classes">
<table id="hist"><thead><tr><th class="n">class</th><th>instances</th><th>shallow bytes</th><th>retained bytes</th></tr></thead><tbody></tbody></table>
<script>
const DATA = /*DATA*/null;
const R = DATA.report, T = DATA.tree;
function human(b){return b>=1e9?(b/1e9).toFixed(2)+' GB':b>=1e6?(b/1e6).toFixed(1)+' MB':b>=1e3?(b/1e3).toFixed(1)+' kB':b+' B';}
function el(t,a,txt){const e=document.createElement(t);if(a)for(const k in a)e.setAttribute(k,a[k]);if(txt!=null)e.textContent=txt;return e;}
document.getElementById('totals').textContent = R.objects+' objects, '+human(R.bytes)+'; reachable: '+R.reachable_objects+' objects, '+human(R.reachable_bytes)+'. Sizes: '+R.layout+'.';
const sus=document.getElementById('suspects');
if(R.suspects.length){sus.appendChild(el('h2',null,'Leak suspects'));for(const s of R.suspects)sus.appendChild(el('p',{class:'suspect'},s.description));}
const kids = T.map(()=>[]), tops=[];
T.forEach((n,i)=>{if(n.parent<0)tops.push(i);else kids[n.parent].push(i);});
const total = R.reachable_bytes||1;
function item(i){
  const n=T[i], li=el('li'), d=el('div',{class:'node','data-node':i});
  const tw=el('span',{class:'tw'},kids[i].length?'▸':'·');
  const bar=el('span',{class:'bar'});bar.style.width=Math.max(1,Math.round(200*n.retained/total))+'px';
  d.append(tw,bar,document.createTextNode(n.class+'  retained '+human(n.retained)+' ('+(100*n.retained/total).toFixed(1)+' %), shallow '+human(n.shallow)+'  '+n.id));
  li.appendChild(d);
  let ul=null;
  d.addEventListener('click',()=>{
    const sites=(R.dominators.find(x=>x.id===n.id)||{}).allocated_at||[];
    document.getElementById('path').textContent = (n.path.length? n.path.join('\n  -> ') : '(path not kept for this node)') +
      sites.map(x=>'\n'+x.class+' allocated at ('+x.bytes+' '+x.metric+'):\n    '+x.stack.slice().reverse().join('\n    ')).join('');
    if(!kids[i].length)return;
    if(ul){ul.remove();ul=null;tw.textContent='▸';return;}
    ul=el('ul',{class:'tree'});for(const k of kids[i])ul.appendChild(item(k));li.appendChild(ul);tw.textContent='▾';
  });
  return li;
}
const tree=document.getElementById('tree');for(const i of tops)tree.appendChild(item(i));
const tb=document.querySelector('#hist tbody');
function hist(f){tb.textContent='';let k=0;for(const c of R.classes){if(f&&!c.name.includes(f))continue;if(++k>500)break;
  const tr=el('tr');tr.append(el('td',{class:'n'},c.name),el('td',null,c.instances),el('td',null,c.shallow_bytes),el('td',null,c.retained_bytes));tb.appendChild(tr);}}
hist('');document.getElementById('filter').addEventListener('input',e=>hist(e.target.value));
</script></body></html>
"#;
