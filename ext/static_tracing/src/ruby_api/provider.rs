//! `StaticTracing::Provider`: a probe namespace, its probe table and its
//! loaded image.
//!
//! The probe table (probe name => Tracepoint, in declaration order) has one
//! copy, here: the image is generated from it, and
//! `lib/static_tracing/provider.rb` reads it through `tracepoints`. The Ruby
//! side keeps the registry and when to load.

use super::arguments;
use super::errors::{argument_error, base_error, provider_load_error};
use super::root;
use super::tracepoint::{self, Tracepoint};
use crate::internal_probes;
use crate::semaphore_poller;
use crate::site_slot::SiteSlot;
use magnus::{
    gc::Marker,
    prelude::*,
    r_hash::ForEach,
    rb_sys::{protect, AsRawValue, FromRawValue},
    typed_data::Obj,
    value::Opaque,
    DataTypeFunctions, Error, RArray, RHash, RString, Ruby, Symbol, TypedData, Value,
};
use stapsdt::elf::ImageSpec;
use stapsdt::image::{self, LoadError, LoadedImage, PublishError, Reloaded, Skipped};
use stapsdt::names::{self, NameKind};
use stapsdt::stub_dir;
use stapsdt::{Arch, ProbeSpec};
use std::cell::{Ref, RefCell, RefMut};
use std::sync::Arc;

#[derive(TypedData)]
#[magnus(class = "StaticTracing::Provider", free_immediately, mark)]
pub struct Provider {
    name: String,
    /// The probe table: probe name (a Symbol) => Tracepoint, in declaration
    /// order, which is the order of the probes in the image. A Ruby Hash so
    /// that marking it never needs a borrow; only `declare` changes it, and
    /// Ruby code only ever sees frozen copies.
    tracepoints: Opaque<RHash>,
    state: RefCell<State>,
}

impl DataTypeFunctions for Provider {
    fn mark(&self, marker: &Marker) {
        marker.mark(self.tracepoints);
    }
}

#[derive(Default)]
struct State {
    image: Option<LoadedImage>,
    /// The tracepoints' slots that point into `image`, so that dropping the
    /// image can clear them first (see `Drop`).
    published: Vec<Arc<SiteSlot>>,
    /// Probes were declared since the image was built: the next `_load`
    /// reloads it with them.
    stale: bool,
}

impl Drop for State {
    /// A provider freed while loaded gives its image back. The GC never
    /// collects a loaded provider (unregister unloads, and every Tracepoint
    /// marks its provider), but Ruby frees every object at exit, in no
    /// particular order: the provider may go before its tracepoints, whose
    /// slots the attach watcher's thread still scans.
    fn drop(&mut self) {
        if let Some(image) = self.image.take() {
            let published = std::mem::take(&mut self.published);
            semaphore_poller::while_images_change(|| {
                for slot in &published {
                    slot.set(None);
                }
                // SAFETY: no slot points into the image any more, so neither
                // `fire` nor the attach watcher (which waits for the lock
                // held here) can reach it; Ruby frees objects with the GVL
                // held (see `ruby_api`), so no thread is in a stub.
                unsafe { image.unload() }
            });
        }
    }
}

impl State {
    /// Loaded, with every probe declared so far.
    fn is_current(&self) -> bool {
        self.image.is_some() && !self.stale
    }

    /// Points every tracepoint at its probe in the image, or at nothing
    /// when none is loaded, and remembers which slots point into it.
    fn publish_sites(&mut self, probes: &Probes) {
        probes.publish_sites(self.image.as_ref());
        self.published = match self.image {
            Some(_) => probes.slots.clone(),
            None => Vec::new(),
        };
    }
}

/// The probe table as the image needs it: what each probe is, and the slot
/// its site is published in, in declaration order.
struct Probes {
    specs: Vec<ProbeSpec>,
    slots: Vec<Arc<SiteSlot>>,
}

impl Probes {
    /// Points every tracepoint at its probe in `image`, or at nothing.
    fn publish_sites(&self, image: Option<&LoadedImage>) {
        for (index, slot) in self.slots.iter().enumerate() {
            slot.set(image.and_then(|image| image.probe_site(index)));
        }
    }
}

pub fn platform_supported() -> bool {
    Arch::host().is_some()
}

pub fn remove_files_at_exit() -> usize {
    image::remove_files_at_exit()
}

/// Writes this process's state file; returns its path. The error's message
/// starts with "no stub directory is usable: " when every directory was
/// passed over (stubs then go to a memfd), and names the cause otherwise.
pub fn publish_state(ruby: &Ruby, contents: magnus::RString) -> Result<String, Error> {
    // SAFETY: copied before any other Ruby call.
    let bytes = unsafe { contents.as_slice() }.to_vec();
    image::publish_state(&bytes, &stub_dir::candidates())
        .map(|path| {
            let path = path.display().to_string();
            internal_probes::state_publish(&path);
            path
        })
        .map_err(|err| {
            if let PublishError::NowhereUsable(skipped) = &err {
                internal_probes::stub_fallback(skipped);
            }
            super::errors::base_error(ruby, err.to_string())
        })
}

impl Provider {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `Provider.new(name)`: a provider with no probes, handed to Ruby's
    /// `initialize` before it is returned, as `Class#new` would. The name was
    /// checked by `StaticTracing::Names` (and `stapsdt` checks it again
    /// before writing it anywhere).
    fn new(ruby: &Ruby, name: String) -> Result<Obj<Provider>, Error> {
        let provider = ruby.obj_wrap(Provider {
            name: name.clone(),
            tracepoints: ruby.hash_new().into(),
            state: RefCell::default(),
        });
        let _: Value = provider.funcall("initialize", (name,))?;
        Ok(provider)
    }

    fn spec<'a>(&'a self, probes: &'a [ProbeSpec]) -> Result<ImageSpec<'a>, LoadError> {
        image::host_spec(&self.name, probes).ok_or(LoadError::Unsupported)
    }

    /// `_declare(name, classes)`: `[tracepoint, declared]`, the Tracepoint
    /// named `name` and whether this call added it; nil when `name` is not
    /// a Symbol or a String of ASCII characters (`StaticTracing::Names`
    /// says what is wrong with it). The name is checked first, against the
    /// naming rule (`stapsdt::names`, whose message is the one
    /// `Native.name_problem` gives), then the types. The same name with the
    /// same types gives the Tracepoint declared first; with other types, an
    /// error. A loaded provider is not reloaded here: `_load` does it, once
    /// for every probe declared since (the Ruby side decides when). On any
    /// error nothing is added.
    fn declare(
        ruby: &Ruby,
        rb_self: Obj<Provider>,
        name: Value,
        classes: RArray,
    ) -> Result<Option<RArray>, Error> {
        let Some(text) = probe_text(ruby, name) else {
            return Ok(None);
        };
        // The name first: what is wrong with it is said before anything
        // about the types.
        let checked = {
            // SAFETY: the symbol's own frozen String, or the String given;
            // no Ruby code runs while it is borrowed.
            let Ok(name) = std::str::from_utf8(unsafe { text.as_slice() }) else {
                return Ok(None);
            };
            match arguments::exact_types(ruby, classes) {
                // Integer, String and Float themselves: the spec can only
                // refuse the name.
                Some((types, len)) => Ok(ProbeSpec::new(name, &types[..len])
                    .map_err(|err| argument_error(ruby, err.to_string()))?),
                None => {
                    names::validate(NameKind::Probe, name)
                        .map_err(|err| argument_error(ruby, err.to_string()))?;
                    Err(name.to_owned())
                }
            }
        };
        let key = match Symbol::from_value(name) {
            Some(symbol) => symbol,
            None => intern(text)?,
        };
        // May run Ruby code (a class's `==`, an `#inspect` for a message), so
        // it comes before the table is read: from the lookup to the insert
        // no Ruby code runs, and the GVL keeps other threads out.
        let parsed = checked.or_else(|name| {
            let label = tracepoint::label(&rb_self.name, &name);
            probe_spec(ruby, &label, &name, classes)
        });
        let table = ruby.get_inner(rb_self.tracepoints);
        if let Some(existing) = lookup(table, key) {
            let existing = Obj::<Tracepoint>::try_convert(existing)?;
            return match parsed {
                Ok(spec) if spec.args() == existing.spec().args() => {
                    Ok(Some(ruby.ary_new_from_values(&[
                        existing.as_value(),
                        ruby.qfalse().as_value(),
                    ])))
                }
                _ => Err(argument_error(
                    ruby,
                    format!(
                        "{} is already declared with {}; cannot redeclare it with {}",
                        tracepoint::label(&rb_self.name, existing.spec().name()),
                        arguments::signature(existing.spec().args()),
                        given_signature(classes)
                    ),
                )),
            };
        }
        let tracepoint = ruby.obj_wrap(Tracepoint::new(
            rb_self,
            parsed?,
            Arc::new(SiteSlot::default()),
        ));
        let mut state = rb_self.state_mut(ruby)?;
        insert(table, key, tracepoint.as_value());
        state.stale |= state.image.is_some();
        Ok(Some(ruby.ary_new_from_values(&[
            tracepoint.as_value(),
            ruby.qtrue().as_value(),
        ])))
    }

    /// `tracepoints`: the probe table, a frozen copy.
    fn tracepoints(ruby: &Ruby, rb_self: &Provider) -> Result<RHash, Error> {
        let copy = ruby.hash_new();
        copy.update(ruby.get_inner(rb_self.tracepoints))?;
        copy.freeze();
        Ok(copy)
    }

    /// The probe table as the image needs it.
    fn probes(&self, ruby: &Ruby) -> Result<Probes, Error> {
        let table = ruby.get_inner(self.tracepoints);
        let mut probes = Probes {
            specs: Vec::with_capacity(table.len()),
            slots: Vec::with_capacity(table.len()),
        };
        table.foreach(|_: Symbol, tracepoint: Obj<Tracepoint>| {
            probes.specs.push(tracepoint.spec().clone());
            probes.slots.push(tracepoint.slot().clone());
            Ok(ForEach::Continue)
        })?;
        Ok(probes)
    }

    fn state(&self, ruby: &Ruby) -> Result<Ref<'_, State>, Error> {
        self.state.try_borrow().map_err(|_| self.busy(ruby))
    }

    fn state_mut(&self, ruby: &Ruby) -> Result<RefMut<'_, State>, Error> {
        self.state.try_borrow_mut().map_err(|_| self.busy(ruby))
    }

    /// Only reachable if a provider method re-entered another on the same
    /// thread (they call no Ruby code while changing the state): an error,
    /// never a panic into Ruby.
    fn busy(&self, ruby: &Ruby) -> Error {
        base_error(
            ruby,
            format!(
                "provider {} is being changed by a call that has not returned",
                self.name
            ),
        )
    }

    /// Rebuilds the loaded image with the probes declared since it was built.
    fn reload(&self, state: &mut State, probes: &Probes) -> Result<Vec<Skipped>, LoadError> {
        let Some(loaded) = state.image.take() else {
            return Ok(Vec::new());
        };
        let spec = match self.spec(&probes.specs) {
            Ok(spec) => spec,
            Err(err) => {
                state.image = Some(loaded);
                return Err(err);
            }
        };
        let outcome = semaphore_poller::while_images_change(|| {
            // Until the new image is in, no tracepoint may use the old one.
            probes.publish_sites(None);
            // SAFETY: see the module docs of `ruby_api`: we hold the GVL, so
            // no thread is in a stub, and the slots were cleared above; the
            // attach watcher waits for the lock held here.
            let (reloaded, outcome) = match unsafe { loaded.reload(&spec, &stub_dir::candidates()) }
            {
                Ok(Reloaded::InPlace(image)) => (Some(image), Ok(Vec::new())),
                Ok(Reloaded::NewFile { image, skipped }) => (Some(image), Ok(skipped)),
                Err(failed) => (failed.previous.map(|previous| *previous), Err(failed.error)),
            };
            state.image = reloaded;
            state.publish_sites(probes);
            outcome
        });
        match &outcome {
            Ok(_) => {
                state.stale = false;
                self.report_loaded(state, probes);
            }
            Err(err) => self.report_load_error(err),
        }
        outcome
    }

    fn report_loaded(&self, state: &State, probes: &Probes) {
        if let Some(image) = &state.image {
            internal_probes::provider_load(
                &self.name,
                || image.path().display().to_string(),
                probes.specs.len(),
            );
        }
    }

    /// The locations tried before giving up count as fallbacks too: that is
    /// where an operator sees why each was refused.
    fn report_load_error(&self, err: &LoadError) {
        if let LoadError::NowhereToLoad { tried, .. } = err {
            internal_probes::stub_fallback(tried);
        }
        internal_probes::load_error(&self.name, || err.to_string());
    }

    /// `_load`: loads the image if it is not loaded, or reloads it with the
    /// probes declared since it was. Returns why each stub location passed
    /// over was (the Ruby side warns), empty when the first one was used.
    fn load(ruby: &Ruby, rb_self: &Provider) -> Result<Vec<String>, Error> {
        if rb_self.state(ruby)?.is_current() {
            return Ok(Vec::new());
        }
        let probes = rb_self.probes(ruby)?;
        let loaded = {
            let mut state = rb_self.state_mut(ruby)?;
            if state.image.is_some() {
                rb_self.reload(&mut state, &probes)
            } else {
                rb_self.load_image(&mut state, &probes)
            }
        };
        let skipped = loaded.map_err(|err| provider_load_error(ruby, err.to_string()))?;
        if !skipped.is_empty() {
            internal_probes::stub_fallback(&skipped);
        }
        Ok(skipped.iter().map(Skipped::to_string).collect())
    }

    fn load_image(&self, state: &mut State, probes: &Probes) -> Result<Vec<Skipped>, LoadError> {
        let loaded = self
            .spec(&probes.specs)
            .and_then(|spec| LoadedImage::load(&spec, &stub_dir::candidates()));
        match loaded {
            Ok((image, skipped)) => {
                semaphore_poller::while_images_change(|| {
                    state.image = Some(image);
                    state.publish_sites(probes);
                });
                state.stale = false;
                self.report_loaded(state, probes);
                Ok(skipped)
            }
            Err(err) => {
                self.report_load_error(&err);
                Err(err)
            }
        }
    }

    fn unload(ruby: &Ruby, rb_self: &Provider) -> Result<(), Error> {
        if rb_self.state(ruby)?.image.is_none() {
            return Ok(());
        }
        let probes = rb_self.probes(ruby)?;
        let mut state = rb_self.state_mut(ruby)?;
        if let Some(image) = state.image.take() {
            semaphore_poller::while_images_change(|| {
                state.publish_sites(&probes);
                // SAFETY: see the module docs of `ruby_api`; the slots no
                // longer point into the image, and the attach watcher waits
                // for the lock held here.
                unsafe { image.unload() };
            });
            state.stale = false;
            internal_probes::provider_unload(&rb_self.name);
        }
        Ok(())
    }

    fn is_loaded(ruby: &Ruby, rb_self: &Provider) -> Result<bool, Error> {
        Ok(rb_self.state(ruby)?.image.is_some())
    }

    /// Whether probes declared since the image was loaded await `_load`.
    fn is_stale(ruby: &Ruby, rb_self: &Provider) -> Result<bool, Error> {
        Ok(rb_self.state(ruby)?.stale)
    }

    fn path(ruby: &Ruby, rb_self: &Provider) -> Result<Option<String>, Error> {
        let state = rb_self.state(ruby)?;
        Ok(state
            .image
            .as_ref()
            .map(|image| image.path().display().to_string()))
    }

    fn name_symbol(ruby: &Ruby, rb_self: &Provider) -> Symbol {
        ruby.to_symbol(&rb_self.name)
    }

    /// `_check_declaration(provider, probe, classes)`: raises what declaring
    /// `probe` with `classes` on a new provider named `provider` would, and
    /// builds nothing.
    fn check_declaration(
        ruby: &Ruby,
        provider: String,
        probe: String,
        classes: RArray,
    ) -> Result<(), Error> {
        let label = tracepoint::label(&provider, &probe);
        probe_spec(ruby, &label, &probe, classes).map(drop)
    }
}

/// The text of a probe name as `_declare` takes it: a Symbol, or a String
/// itself (a subclass's `to_s` may say otherwise), of ASCII characters.
/// Anything else is `StaticTracing::Names`'s to explain.
fn probe_text(ruby: &Ruby, name: Value) -> Option<RString> {
    let text = match Symbol::from_value(name) {
        Some(symbol) => {
            // SAFETY: rb_sym2str returns the symbol's own frozen String.
            RString::from_value(unsafe { Value::from_raw(rb_sys::rb_sym2str(symbol.as_raw())) })?
        }
        None => RString::from_value(name)
            .filter(|text| text.class().as_raw() == ruby.class_string().as_raw())?,
    };
    is_ascii(text).then_some(text)
}

/// The Symbol of an ASCII String.
fn intern(text: RString) -> Result<Symbol, Error> {
    // SAFETY: an ASCII String cannot be refused; running out of memory is
    // caught by `protect`.
    let key = protect(|| unsafe { rb_sys::rb_str_intern(text.as_raw()) })?;
    // SAFETY: what rb_str_intern returned, a Symbol.
    Symbol::try_convert(unsafe { Value::from_raw(key) })
}

/// The table's entry for `key`. A Symbol's hash and equality are the VM's
/// own (no method is called) and a lookup cannot raise, so it needs no
/// `protect`: a boot declares thousands of probes.
fn lookup(table: RHash, key: Symbol) -> Option<Value> {
    let missing = rb_sys::Qundef as rb_sys::VALUE;
    // SAFETY: live objects; rb_hash_lookup2 returns the value or `missing`.
    let found = unsafe { rb_sys::rb_hash_lookup2(table.as_raw(), key.as_raw(), missing) };
    // SAFETY: a value the table holds.
    (found != missing).then(|| unsafe { Value::from_raw(found) })
}

/// Adds `key => value` to the table: as `lookup`, nothing here calls a
/// method, and the table is never frozen nor iterated by Ruby code (it is
/// only ever handed out as a copy), so the insert cannot raise.
fn insert(table: RHash, key: Symbol, value: Value) {
    // SAFETY: live objects; see above.
    unsafe { rb_sys::rb_hash_aset(table.as_raw(), key.as_raw(), value.as_raw()) };
}

/// Whether a String is in an ASCII-compatible encoding and holds only
/// ASCII characters (Ruby's `ascii_only?`, which implies `valid_encoding?`).
fn is_ascii(text: RString) -> bool {
    // SAFETY: a live String; reads (and may cache) its code range.
    unsafe { rb_sys::rb_enc_str_asciionly_p(text.as_raw()) != 0 }
}

/// `(Integer, :foo)`: the classes given to a redeclaration, as given.
fn given_signature(classes: RArray) -> String {
    let shown: Vec<String> = classes.into_iter().map(|class| class.inspect()).collect();
    format!("({})", shown.join(", "))
}

/// The probe `name` declared with `classes`, or why it cannot be.
fn probe_spec(ruby: &Ruby, label: &str, name: &str, classes: RArray) -> Result<ProbeSpec, Error> {
    let types = arguments::parse_types(ruby, label, classes)?;
    ProbeSpec::new(name, &types).map_err(|err| argument_error(ruby, err.to_string()))
}

pub fn init(ruby: &Ruby) -> Result<(), Error> {
    let class = root(ruby).define_class("Provider", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_singleton_method("new", function!(Provider::new, 1))?;
    class.define_singleton_method(
        "_check_declaration",
        function!(Provider::check_declaration, 3),
    )?;
    class.define_method("name", method!(Provider::name_symbol, 0))?;
    class.define_method("tracepoints", method!(Provider::tracepoints, 0))?;
    class.define_method("_declare", method!(Provider::declare, 2))?;
    class.define_method("_load", method!(Provider::load, 0))?;
    class.define_method("_unload", method!(Provider::unload, 0))?;
    class.define_method("loaded?", method!(Provider::is_loaded, 0))?;
    class.define_method("_stale?", method!(Provider::is_stale, 0))?;
    class.define_method("path", method!(Provider::path, 0))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ruby frees every object at exit, in no particular order: a loaded
    /// provider's state dropped before its tracepoints must leave none of
    /// their slots pointing into the image it unmaps, since the attach
    /// watcher's thread keeps reading them.
    #[test]
    fn a_loaded_state_dropped_clears_the_slots_pointing_into_its_image() {
        let probes = Probes {
            specs: vec![ProbeSpec::new("hit", &[]).unwrap()],
            slots: vec![Arc::new(SiteSlot::default())],
        };
        let spec = image::host_spec("dropped_while_loaded", &probes.specs).unwrap();
        let (image, _) = LoadedImage::load(&spec, &stub_dir::candidates()).unwrap();
        let mut state = State::default();
        state.image = Some(image);
        state.publish_sites(&probes);
        assert!(probes.slots[0].get().is_some());
        drop(state);
        assert!(probes.slots[0].get().is_none());
    }
}
