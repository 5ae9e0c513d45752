// Opens a profile with speedscope's own import code, as speedscope.app does
// when a file is dropped on it, and prints what it made of it as JSON:
//
//   node speedscope_import.js SPEEDSCOPE_BUNDLE FILE [NAME]
//
// SPEEDSCOPE_BUNDLE is the release bundle of the speedscope npm package
// (dist/release/speedscope-*.js). NAME is the file's name as speedscope sees
// it (speedscope chooses its importer by the name first), FILE's own by
// default. Prints {"importer": what speedscope said it imported the file as,
// "warnings": what it warned of, "profiles": [{"name", "unit", "calls":
// [[frame, start, end], ...]}]}, each call of each frame with its start and
// end in the profile's unit. Exits 1 with a message if speedscope could not
// import the file.
//
// The bundle is a web page's script: it is run here with the page's render
// call replaced by handing over speedscope's importer (found by its shape:
// the import module's `importProfilesFromArrayBuffer`, which the page calls
// with a dropped file's name and bytes), with what it touches of a browser
// stubbed.
"use strict"
const fs = require("fs")
const path = require("path")
const vm = require("vm")

const [bundlePath, filePath, givenName] = process.argv.slice(2)
const fileName = givenName || path.basename(filePath)

const bundle = fs.readFileSync(bundlePath, "utf8")
// The import module's exports: var NS={};$l(NS,{...,importProfilesFromArrayBuffer:()=>f,...})
const importModule = bundle.match(/var ([\w$]+)=\{\};[\w$]+\(\1,\{[^}]*importProfilesFromArrayBuffer:\(\)=>/)
// ...and the function that initializes it, which the page calls when it
// first imports: Promise.resolve().then(()=>(INIT(),NS))
const init = importModule && bundle.match(new RegExp(`\\(\\(\\)=>\\(([\\w$]+)\\(\\),${importModule[1].replace("$", "\\$")}\\)\\)`))
const render = bundle.lastIndexOf("})();")
if (!importModule || !init || render < 0) {
  console.error(`${bundlePath}: not a speedscope release bundle this script knows`)
  process.exit(2)
}
// The bundle ends "...;render(...);})();": keep what is before the render.
const source = `${bundle.slice(0, bundle.lastIndexOf(";", render - 2) + 1)}
globalThis.__importFromArrayBuffer = (${init[1]}(), ${importModule[1]}).importProfilesFromArrayBuffer;})();`

const messages = { log: [], warn: [], error: [] }
const quiet = {
  log: (...args) => messages.log.push(args.join(" ")),
  info: (...args) => messages.log.push(args.join(" ")),
  warn: (...args) => messages.warn.push(args.join(" ")),
  error: (...args) => messages.error.push(args.join(" ")),
  debug: () => {},
  time: () => {},
  timeEnd: () => {},
}
const element = () => new Proxy(function () {}, {
  get: (_, key) => (key === Symbol.toPrimitive ? () => "" : element()),
  apply: () => element(),
  construct: () => element(),
  set: () => true,
})
const sandbox = {
  console: quiet,
  setTimeout,
  clearTimeout,
  setInterval,
  clearInterval,
  requestAnimationFrame: () => 0,
  TextDecoder,
  TextEncoder,
  URL,
  Uint8Array,
  ArrayBuffer,
  DataView,
  Promise,
  WebAssembly,
  fetch: () => Promise.reject(new Error("no network here")),
  navigator: { userAgent: "node", platform: "Linux" },
  location: { hash: "", search: "", href: "file:///", protocol: "file:" },
  localStorage: { getItem: () => null, setItem: () => {} },
  matchMedia: () => ({ matches: false, addEventListener: () => {}, addListener: () => {} }),
  document: element(),
  addEventListener: () => {},
  removeEventListener: () => {},
  devicePixelRatio: 1,
}
sandbox.window = sandbox
sandbox.self = sandbox
sandbox.globalThis = sandbox
vm.createContext(sandbox)
vm.runInContext(source, sandbox, { filename: bundlePath })

async function main() {
  const bytes = fs.readFileSync(filePath)
  const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength)
  const group = await sandbox.__importFromArrayBuffer(fileName, buffer)
  if (!group) throw new Error(`speedscope could not import ${fileName}`)
  const profiles = group.profiles.map(profile => {
    const calls = []
    const open = new Map()
    profile.forEachCall(
      (node, value) => open.set(node, value),
      (node, value) => {
        calls.push([node.frame.name, open.get(node), value])
        open.delete(node)
      },
    )
    return { name: profile.getName(), unit: profile.getWeightUnit(), calls }
  })
  const importer = messages.log.find(message => message.startsWith("Importing as")) || null
  return { importer, warnings: messages.warn.concat(messages.error), profiles }
}

main().then(
  result => process.stdout.write(JSON.stringify(result) + "\n"),
  error => {
    process.stderr.write(`${error.stack || error}\n${messages.warn.concat(messages.error).join("\n")}\n`)
    process.exit(1)
  },
)
