package report

import "html/template"

// pageTemplate is the whole report. html/template escapes every value in
// its context (op names can hold quotes, < and &); the only HTML taken as
// is, Graphviz's SVG, is dot's own escaped output.
var pageTemplate = template.Must(template.New("page").Parse(pageHTML))

const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="opplace report">
<title>{{.Title}}</title>
<style>
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--soft:#f6f8fa;--ok:#1a7f37;--bad:#cf222e;--warn:#9a6700;--accent:#0969da}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;background:#fff;color:var(--fg);font:14px/1.5 -apple-system,BlinkMacSystemFont,"Segoe UI","Noto Sans",Helvetica,Arial,sans-serif}
main{max-width:1240px;margin:0 auto;padding:28px 28px 56px}
header{display:flex;gap:24px;align-items:flex-start;justify-content:space-between;padding-bottom:16px;border-bottom:1px solid var(--line)}
h1{font-size:26px;line-height:1.25;margin:0 0 4px;font-weight:650}
h2{font-size:19px;margin:40px 0 10px;padding-bottom:6px;border-bottom:1px solid var(--line);font-weight:650}
h3{font-size:14px;margin:0;font-weight:600}
p{margin:8px 0}
.sub{color:var(--muted);margin:0;word-break:break-all}
.verdict{flex:none;text-align:center;border-radius:10px;padding:10px 22px;min-width:170px}
.verdict .big{display:block;font-size:22px;font-weight:700;letter-spacing:.02em}
.verdict .small{display:block;font-size:12px}
.verdict.ok{background:#dafbe1;color:var(--ok);border:1px solid #4ac26b}
.verdict.bad{background:#ffebe9;color:var(--bad);border:2px solid var(--bad)}
.fitsnote{margin:12px 0 0;font-weight:600}
.fitsnote.bad{color:var(--bad)}
nav{margin:14px 0 0;font-size:13px}
nav a{color:var(--accent);text-decoration:none;margin-right:16px}
nav a:hover{text-decoration:underline}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(205px,1fr));gap:10px;margin-top:18px}
.card{border:1px solid var(--line);border-radius:8px;padding:9px 13px;background:#fff}
.card .k{font-size:11.5px;color:var(--muted);text-transform:uppercase;letter-spacing:.05em}
.card .v{font-size:19px;font-weight:650;font-variant-numeric:tabular-nums;overflow-wrap:anywhere}
.card .n{font-size:12px;color:var(--muted)}
.card.ok{border-color:#4ac26b;background:#f0fff4}.card.ok .v{color:var(--ok)}
.card.bad{border:2px solid var(--bad);background:#fff5f5}.card.bad .v{color:var(--bad)}
.warnings{margin-top:16px;border:1px solid #d4a72c;background:#fff8c5;border-radius:8px;padding:8px 14px}
.warnings ul{margin:4px 0;padding-left:20px}
.note{color:var(--muted);font-size:13px;margin:6px 0}
.tablewrap{overflow-x:auto}
.nowrap{white-space:nowrap}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{padding:5px 9px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
thead th{background:var(--soft);font-weight:600;white-space:nowrap;border-bottom:1px solid #bcc5ce}
tbody tr:hover td{background:#f3f7fb}
.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.stages thead th{white-space:normal;vertical-align:bottom}
table.stages{font-size:12.5px}
.tcell{display:flex;align-items:center;justify-content:space-between;gap:8px}
td.op{overflow-wrap:break-word;min-width:150px}
.subnum{font-size:11.5px;color:var(--muted)}
.mono{font-family:ui-monospace,SFMono-Regular,"SF Mono",Menlo,Consolas,monospace;font-size:12px;overflow-wrap:break-word}
tr.chosen td{background:#dafbe1;font-weight:600}
tr.nofit td.fits,tr.over td.used{color:var(--bad);font-weight:650}
tr.bottleneck td{background:#fff8e6}
tr.failed td,tr.pruned td{color:var(--muted)}
.ubar{display:inline-block;vertical-align:middle;width:64px;height:8px;border-radius:4px;background:#eaeef2;margin-right:6px;overflow:hidden}
.ubar span{display:block;height:100%}
.u-ok{background:#4ac26b}.u-warn{background:#d4a72c}.u-bad{background:var(--bad)}
.legend{display:flex;flex-wrap:wrap;gap:16px;font-size:12.5px;color:var(--muted);margin:4px 0 8px}
.legend i{display:inline-block;width:12px;height:12px;border-radius:2px;vertical-align:-2px;margin-right:5px}
.chart{width:100%;height:auto;display:block}
.mems{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:12px}
.mempanel{border:1px solid var(--line);border-radius:8px;padding:8px 10px 2px}
.mempanel.over{border:2px solid var(--bad)}
.mempanel .n{font-size:12px;color:var(--muted)}
.mempanel.over .n{color:var(--bad)}
.figure{border:1px solid var(--line);border-radius:8px;padding:10px;background:#fff}
.dotview{display:block;margin:0 auto}
footer{margin-top:40px;color:var(--muted);font-size:12px;border-top:1px solid var(--line);padding-top:10px}
svg text{font-family:-apple-system,BlinkMacSystemFont,"Segoe UI","Noto Sans",Helvetica,Arial,sans-serif}
.gf0{fill:#3f6fa8}.gf1{fill:#86aedb}.gb0{fill:#e0701f}.gb1{fill:#f4b27a}.gu{fill:#3d9a4b}.gx{fill:#8c959f}
.gt{fill:#8250df}.ga{fill:#cf222e}
i.gf0{background:#3f6fa8}i.gf1{background:#86aedb}i.gb0{background:#e0701f}i.gu{background:#3d9a4b}i.gt{background:#8250df}i.ga{background:#cf222e}
.band{fill:#f6f8fa}
.grid{stroke:#e6eaef;stroke-width:1}
.axl{stroke:#8c959f;stroke-width:1}
.ax{font-size:11px;fill:#59636e}
.rl{font-size:12px;fill:#1f2328;font-weight:600}
.rk{font-size:10.5px;fill:#59636e}
.rt{font-size:11px;fill:#59636e}
.stepl{stroke:#1f2328;stroke-width:1;stroke-dasharray:4 3}
.stept{font-size:11px;fill:#1f2328;font-weight:600}
.mline{fill:none;stroke:#0969da;stroke-width:1.6}
.marea{fill:#0969da;fill-opacity:.13}
.cap{stroke:#cf222e;stroke-width:1.5;stroke-dasharray:6 4}
.capt{font-size:11px;fill:#cf222e;font-weight:600}
.pk{fill:#0969da;stroke:#fff;stroke-width:1.5}
.pkt{font-size:11px;fill:#0550ae;font-weight:650}
.sbar{width:72px;height:12px;display:inline-block;vertical-align:middle;margin-right:6px}
.sbg{fill:#eaeef2}
.gbg{fill:#eaeef2}.gok{fill:#4ac26b}.gwarn{fill:#d4a72c}.gbad{fill:#cf222e}
.gaut{font-size:11px;fill:#1f2328;font-weight:600}
.crow{fill:#dafbe1}
.cb{fill:#8fb3dc}.cbc{fill:#1a7f37}.cbn{fill:#cf222e;fill-opacity:.45;stroke:#cf222e;stroke-width:1}
.cl{font-size:12.5px;fill:#1f2328;font-weight:600}.clc{font-size:12.5px;fill:#116329;font-weight:700}
.cf{font-size:11px;fill:#59636e}
.cvchosen{font-size:12px;fill:#116329;font-weight:700}.cvslower{font-size:12px;fill:#1f2328}.cvnofit{font-size:12px;fill:#cf222e;font-weight:600}
.cwhy{font-size:11.5px;fill:#59636e;font-style:italic;paint-order:stroke;stroke:#fff;stroke-width:3px}
.lb{stroke:#59636e;stroke-width:1.2;stroke-dasharray:3 3}
.lbt{font-size:11px;fill:#59636e}
.cvchosen,.cvslower,.cvnofit{paint-order:stroke;stroke:#fff;stroke-width:3px}
@media print{main{max-width:none;padding:0}h2{break-after:avoid}.figure,.mempanel,table{break-inside:avoid}nav{display:none}}
</style>
</head>
<body>
<main>
<header>
<div>
<h1>{{.Title}}</h1>
<p class="sub">{{.Subtitle}}</p>
<nav><a href="#summary">Summary</a><a href="#schedule">Schedule</a><a href="#memory">Memory</a><a href="#stages">Stages</a><a href="#candidates">Strategies tried</a>{{if .Rules}}<a href="#rules">Rules</a>{{end}}<a href="#devices">Device view</a></nav>
</div>
{{if .Fits}}<div class="verdict ok" id="fits"><span class="big">FITS</span><span class="small">in every device's memory</span></div>{{else}}<div class="verdict bad" id="fits"><span class="big">DOES NOT FIT</span><span class="small">a device exceeds its memory</span></div>{{end}}
</header>

<section id="summary">
<h2>Summary</h2>
<p class="fitsnote{{if not .Fits}} bad{{end}}">{{.FitsNote}}</p>
<div class="cards">
{{range .Cards}}<div class="card{{if .Class}} {{.Class}}{{end}}"><div class="k">{{.Key}}</div><div class="v">{{.Value}}</div>{{if .Note}}<div class="n">{{.Note}}</div>{{end}}</div>
{{end}}</div>
{{if .Warnings}}<div class="warnings"><strong>Warnings</strong><ul>
{{range .Warnings}}<li>{{.}}</li>
{{end}}</ul></div>{{end}}
<h3 style="margin-top:22px">Devices</h3>
<div class="tablewrap"><table class="devices">
<thead><tr><th>Device</th><th>Type</th><th>Host</th><th>Role</th><th class="num">Ops</th><th class="num">Busy (ms)</th><th class="num">Util.</th><th class="num">Peak memory</th><th class="num">Capacity</th><th>Used</th><th class="num">Resident</th></tr></thead>
<tbody>
{{range .Devices}}<tr{{if .Over}} class="over"{{end}}><td class="mono">{{.Name}}</td><td>{{.Type}}</td><td>{{.Host}}</td><td>{{.Role}}</td><td class="num">{{.Ops}}</td><td class="num">{{.Busy}}</td><td class="num">{{.Util}}</td><td class="num">{{.Peak}}</td><td class="num">{{.Capacity}}</td><td class="num used"><span class="ubar"><span class="u-{{.UsedClass}}" style="width:{{.UsedPct}}"></span></span>{{.Used}}</td><td class="num">{{.Resident}}</td></tr>
{{end}}</tbody></table></div>
</section>

<section id="schedule">
<h2>Schedule</h2>
{{with .Gantt}}{{if .Legend}}<div class="legend">{{range .Legend}}<span><i class="{{.Class}}"></i>{{.Label}}</span>{{end}}</div>{{end}}
{{with .Chart}}<div class="figure">{{template "svg" .}}</div>{{end}}
{{range .Notes}}<p class="note">{{.}}</p>
{{end}}{{end}}
</section>

<section id="memory">
<h2>Memory over the step</h2>
{{if .Memory}}<p class="note">Each device's memory held over the step (the most held in each interval, so every peak shows), all on one scale; the dot marks the peak, the dashed red line the capacity when it is within the scale, and the gauge on the right the peak's share of the capacity.</p>
<div class="mems">
{{range .Memory}}<div class="mempanel{{if .Over}} over{{end}}"><h3 class="mono">{{.Title}}</h3><div class="n">{{.Sub}}</div>{{if .Same}}<div class="n">{{.Same}}</div>{{end}}{{template "svg" .Chart}}</div>
{{end}}</div>{{end}}
{{range .MemoryNotes}}<p class="note">{{.}}</p>
{{end}}</section>

<section id="stages">
<h2>Stages and split points</h2>
{{if .Stages}}<div class="tablewrap"><table class="stages">
<thead><tr><th class="num">Stage</th><th>Devices</th><th class="num">Replicas</th><th class="num">Ops</th><th>Time per micro-batch (ms)</th><th class="num">Compute</th><th class="num">Comm</th><th class="num">Sync</th><th class="num">All-reduce</th><th class="num">Sends</th><th class="num">Peak memory</th><th class="num">Micro-batches stashed</th><th>First op</th><th>Last op</th>{{if .ShowModules}}<th>Modules</th>{{end}}</tr></thead>
<tbody>
{{$mods := .ShowModules}}{{range .Stages}}<tr{{if .Bottleneck}} class="bottleneck"{{end}}><td class="num">{{.Index}}</td><td class="mono nowrap" title="{{.DevicesTitle}}">{{.Devices}}</td><td class="num">{{.Replicas}}</td><td class="num">{{.Ops}}</td><td class="num"><div class="tcell">{{template "svg" .Bar}}<span>{{.Time}}</span></div></td><td class="num">{{.Compute}}</td><td class="num">{{.Comm}}</td><td class="num">{{.Sync}}</td><td class="num">{{.AllReduce}}{{if .AllReduceTime}}<div class="subnum">{{.AllReduceTime}}</div>{{end}}</td><td class="num">{{.Sends}}</td><td class="num">{{.Peak}}</td><td class="num">{{.Alive}}</td><td class="mono op">{{.FirstOp}}</td><td class="mono op">{{.LastOp}}</td>{{if $mods}}<td class="mono op">{{.Module}}</td>{{end}}</tr>
{{end}}</tbody></table></div>
<div class="legend"><span><i class="gf0"></i>compute</span><span><i class="gt"></i>sends</span><span><i class="ga"></i>sync (all-reduce and update)</span></div>{{end}}
{{range .StageNotes}}<p class="note">{{.}}</p>
{{end}}</section>

<section id="candidates">
<h2>Strategies tried</h2>
{{with .CandChart}}<div class="figure">{{template "svg" .}}</div>{{end}}
{{if .CandNote}}<p class="note">{{.CandNote}}</p>{{end}}
{{if .CandRows}}<div class="tablewrap"><table class="candidates">
<thead><tr><th>Strategy</th><th>Family</th><th>Shape</th><th class="num">Step (ms)</th><th class="num">Samples/s</th><th class="num">Peak memory</th><th>Fits</th><th>Why not chosen</th></tr></thead>
<tbody>
{{range .CandRows}}<tr class="{{.Status}}"><td class="mono">{{.Strategy}}</td><td>{{.Family}}</td><td>{{.Shape}}</td><td class="num">{{.Step}}</td><td class="num">{{.Throughput}}</td><td class="num">{{.Peak}}</td><td class="fits">{{.Fits}}</td><td>{{.Why}}</td></tr>
{{end}}</tbody></table></div>{{end}}
</section>
{{if .Rules}}
<section id="rules">
<h2>Rules</h2>
<p class="note">The rules the plan was made under. Every hard rule holds in this plan; a soft rule's penalty is what it added to the objective the plan was chosen by.</p>
<div class="tablewrap"><table class="rules">
<thead><tr><th>Rule</th><th>Written at</th><th class="num">Ops</th><th>Examples</th><th>Devices</th><th>What it did</th></tr></thead>
<tbody>
{{range .Rules}}<tr><td class="mono">{{.Rule}}</td><td class="mono">{{.Source}}</td><td class="num">{{.Ops}}</td><td class="mono op">{{.Examples}}</td><td class="mono">{{.Devices}}</td><td>{{.Effect}}</td></tr>
{{end}}</tbody></table></div>
</section>
{{end}}
<section id="devices">
<h2>Device view</h2>
{{if .Graph}}<p class="note">Devices that run ops, grouped by stage, and the bytes they send each other (Graphviz).</p>
<div class="figure">{{.Graph}}</div>{{end}}
{{if .GraphNote}}<p class="note" id="graphnote">{{.GraphNote}}</p>{{end}}
</section>

<footer>Written by opplace report{{if .Source}} from {{.Source}}{{end}}. Predictions come from opplace's simulator of the step; hover bars for details.</footer>
</main>
<script>
(function(){var s=document.querySelectorAll("svg"),bad=0;for(var i=0;i<s.length;i++){var r=s[i].getBoundingClientRect();if(!(r.width>0&&r.height>0))bad++}document.body.setAttribute("data-rendered",s.length+" svg, "+bad+" empty")})();
</script>
</body>
</html>
{{define "svg"}}<svg class="{{.Class}}{{if ne .Class "sbar"}} chart{{end}}" viewBox="0 0 {{.W}} {{.H}}" role="img" aria-label="{{.Label}}">
{{range .Bands}}<rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" class="{{.Class}}"/>
{{end}}{{range .Lines}}<line x1="{{.X1}}" y1="{{.Y1}}" x2="{{.X2}}" y2="{{.Y2}}" class="{{.Class}}"/>
{{end}}{{range .Rects}}<rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" class="{{.Class}}">{{if .Title}}<title>{{.Title}}</title>{{end}}</rect>
{{end}}{{range .Paths}}<path d="{{.D}}" class="{{.Class}}">{{if .Title}}<title>{{.Title}}</title>{{end}}</path>
{{end}}{{range .Dots}}<circle cx="{{.X}}" cy="{{.Y}}" r="{{.R}}" class="{{.Class}}">{{if .Title}}<title>{{.Title}}</title>{{end}}</circle>
{{end}}{{range .Texts}}<text x="{{.X}}" y="{{.Y}}" text-anchor="{{.Anchor}}" class="{{.Class}}">{{.Text}}{{if .Title}}<title>{{.Title}}</title>{{end}}</text>
{{end}}</svg>{{end}}`
