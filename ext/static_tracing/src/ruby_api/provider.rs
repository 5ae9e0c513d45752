//! `StaticTracing::Provider`: a probe namespace and its loaded image.
//!
//! The native side keeps what the image is generated from (the probes in
//! declaration order) and the image itself; `lib/static_tracing/provider.rb`
//! keeps the registry and the name => Tracepoint table. No Ruby value is
//! held here, so there is nothing to mark.

use super::arguments;
use super::errors::{argument_error, base_error, provider_load_error};
use super::root;
use super::tracepoint::Tracepoint;
use crate::attach_watch;
use crate::internal_probes;
use crate::site_slot::SiteSlot;
use magnus::{
    function, method, prelude::*, typed_data::Obj, DataTypeFunctions, Error, RArray, Ruby, Symbol,
    TypedData,
};
use stapsdt::elf::ImageSpec;
use stapsdt::image::{self, LoadError, LoadedImage, PublishError, Reloaded, Skipped};
use stapsdt::names::{self, NameKind};
use stapsdt::stub_dir;
use stapsdt::{Arch, ProbeSpec};
use std::cell::{Ref, RefCell, RefMut};
use std::collections::HashSet;
use std::sync::Arc;

#[derive(TypedData)]
#[magnus(class = "StaticTracing::Provider", free_immediately)]
pub struct Provider {
    name: String,
    state: RefCell<State>,
}

impl DataTypeFunctions for Provider {}

#[derive(Default)]
struct State {
    probes: Vec<ProbeSpec>,
    names: HashSet<String>,
    slots: Vec<Arc<SiteSlot>>,
    image: Option<LoadedImage>,
    /// Probes were declared since the image was built: the next `_load`
    /// reloads it with them.
    stale: bool,
}

impl Drop for State {
    /// A provider collected while loaded (the Ruby side never lets that
    /// happen: unregister unloads) gives its image back.
    fn drop(&mut self) {
        if let Some(image) = self.image.take() {
            // SAFETY: every Tracepoint marks its provider, so when the
            // provider is collected no Tracepoint is left to fire into this
            // image, and the GC runs with the GVL held (see `ruby_api`).
            // The attach watcher only reads slots of watched Tracepoints,
            // which are gone too, and waits for the lock meanwhile.
            attach_watch::while_images_change(|| unsafe { image.unload() });
        }
    }
}

impl State {
    /// Points every tracepoint at its probe in the current image, or at
    /// nothing when unloaded.
    fn publish_sites(&self) {
        publish_sites(&self.slots, self.image.as_ref());
    }
}

fn publish_sites(slots: &[Arc<SiteSlot>], image: Option<&LoadedImage>) {
    for (index, slot) in slots.iter().enumerate() {
        slot.set(image.and_then(|image| image.probe_site(index)));
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

    fn new(ruby: &Ruby, name: String) -> Result<Obj<Provider>, Error> {
        names::validate(NameKind::Provider, &name)
            .map_err(|err| argument_error(ruby, err.to_string()))?;
        Ok(ruby.obj_wrap(Provider {
            name,
            state: RefCell::default(),
        }))
    }

    fn spec<'a>(&'a self, probes: &'a [ProbeSpec]) -> Result<ImageSpec<'a>, LoadError> {
        image::host_spec(&self.name, probes).ok_or(LoadError::Unsupported)
    }

    /// Adds a probe and returns its new Tracepoint. A loaded provider is
    /// not reloaded here: `_load` does it, once for every probe declared
    /// since (the Ruby side decides when). On any error nothing is added.
    /// Redeclarations are resolved by the Ruby side.
    fn declare(
        ruby: &Ruby,
        rb_self: Obj<Provider>,
        name: String,
        classes: RArray,
    ) -> Result<Obj<Tracepoint>, Error> {
        let label = format!("tracepoint {}:{}", rb_self.name, name);
        let types = arguments::parse_types(ruby, &label, classes)?;
        let spec =
            ProbeSpec::new(&name, &types).map_err(|err| argument_error(ruby, err.to_string()))?;
        let slot = Arc::new(SiteSlot::default());
        {
            let mut state = rb_self.state_mut(ruby)?;
            if !state.names.insert(name.clone()) {
                return Err(argument_error(ruby, format!("{label} is already declared")));
            }
            state.probes.push(spec);
            state.slots.push(slot.clone());
            state.stale |= state.image.is_some();
        }
        Ok(ruby.obj_wrap(Tracepoint::new(rb_self, name, types, slot)))
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
    fn reload(&self, state: &mut State) -> Result<Vec<Skipped>, LoadError> {
        let State {
            probes,
            slots,
            image,
            ..
        } = state;
        let Some(loaded) = image.take() else {
            return Ok(Vec::new());
        };
        let spec = match self.spec(probes) {
            Ok(spec) => spec,
            Err(err) => {
                *image = Some(loaded);
                return Err(err);
            }
        };
        let outcome = attach_watch::while_images_change(|| {
            // Until the new image is in, no tracepoint may use the old one.
            publish_sites(slots, None);
            // SAFETY: see the module docs of `ruby_api`: we hold the GVL, so
            // no thread is in a stub, and the slots were cleared above; the
            // attach watcher waits for the lock held here.
            let (reloaded, outcome) = match unsafe { loaded.reload(&spec, &stub_dir::candidates()) }
            {
                Ok(Reloaded::InPlace(image)) => (Some(image), Ok(Vec::new())),
                Ok(Reloaded::NewFile { image, skipped }) => (Some(image), Ok(skipped)),
                Err(failed) => (failed.previous.map(|previous| *previous), Err(failed.error)),
            };
            *image = reloaded;
            publish_sites(slots, image.as_ref());
            outcome
        });
        match &outcome {
            Ok(_) => {
                state.stale = false;
                self.report_loaded(state);
            }
            Err(err) => self.report_load_error(err),
        }
        outcome
    }

    fn report_loaded(&self, state: &State) {
        if let Some(image) = &state.image {
            internal_probes::provider_load(
                &self.name,
                || image.path().display().to_string(),
                state.probes.len(),
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

    /// Loads the image if it is not loaded, or reloads it with the probes
    /// declared since it was.
    fn load(ruby: &Ruby, rb_self: &Provider) -> Result<(), Error> {
        let loaded = {
            let mut state = rb_self.state_mut(ruby)?;
            if state.image.is_some() {
                if !state.stale {
                    return Ok(());
                }
                rb_self.reload(&mut state)
            } else {
                rb_self.load_image(&mut state)
            }
        };
        match loaded {
            Ok(skipped) => warn_skipped(ruby, skipped),
            Err(err) => Err(provider_load_error(ruby, err.to_string())),
        }
    }

    fn load_image(&self, state: &mut State) -> Result<Vec<Skipped>, LoadError> {
        let loaded = self
            .spec(&state.probes)
            .and_then(|spec| LoadedImage::load(&spec, &stub_dir::candidates()));
        match loaded {
            Ok((image, skipped)) => {
                attach_watch::while_images_change(|| {
                    state.image = Some(image);
                    state.publish_sites();
                });
                state.stale = false;
                self.report_loaded(state);
                Ok(skipped)
            }
            Err(err) => {
                self.report_load_error(&err);
                Err(err)
            }
        }
    }

    fn unload(ruby: &Ruby, rb_self: &Provider) -> Result<(), Error> {
        let mut state = rb_self.state_mut(ruby)?;
        if let Some(image) = state.image.take() {
            attach_watch::while_images_change(|| {
                state.publish_sites();
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
}

/// Hands the stub locations that were passed over to
/// `StaticTracing.warn_stub_fallback`, which says so once.
fn warn_skipped(ruby: &Ruby, skipped: Vec<Skipped>) -> Result<(), Error> {
    if skipped.is_empty() {
        return Ok(());
    }
    internal_probes::stub_fallback(&skipped);
    let messages: Vec<String> = skipped.iter().map(Skipped::to_string).collect();
    root(ruby).funcall::<_, _, magnus::Value>("warn_stub_fallback", (messages,))?;
    Ok(())
}

pub fn init(ruby: &Ruby) -> Result<(), Error> {
    let class = root(ruby).define_class("Provider", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_singleton_method("_new", function!(Provider::new, 1))?;
    class.define_method("name", method!(Provider::name_symbol, 0))?;
    class.define_method("_declare", method!(Provider::declare, 2))?;
    class.define_method("_load", method!(Provider::load, 0))?;
    class.define_method("_unload", method!(Provider::unload, 0))?;
    class.define_method("loaded?", method!(Provider::is_loaded, 0))?;
    class.define_method("_stale?", method!(Provider::is_stale, 0))?;
    class.define_method("path", method!(Provider::path, 0))?;
    // Called by StaticTracing::Switch, which owns the tracing state.
    root(ruby)
        .define_module("Native")?
        .define_singleton_method(
            "tracing_toggled",
            function!(internal_probes::tracing_toggle, 1),
        )?;
    Ok(())
}
