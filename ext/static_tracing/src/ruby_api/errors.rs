//! Exception classes: defined once, in `lib/static_tracing/errors.rb`, and
//! looked up here on first use.

use super::root;
use magnus::{value::Lazy, Error, ExceptionClass, Module, Ruby};

/// `StaticTracing::Error`, the base of the gem's own errors.
pub fn base_error(ruby: &Ruby, message: String) -> Error {
    static CLASS: Lazy<ExceptionClass> = Lazy::new(|ruby| root(ruby).const_get("Error").unwrap());
    Error::new(ruby.get_inner(&CLASS), message)
}

/// `StaticTracing::ProviderLoadError`: an image could not be loaded anywhere.
pub fn provider_load_error(ruby: &Ruby, message: String) -> Error {
    static CLASS: Lazy<ExceptionClass> =
        Lazy::new(|ruby| root(ruby).const_get("ProviderLoadError").unwrap());
    Error::new(ruby.get_inner(&CLASS), message)
}

pub fn argument_error(ruby: &Ruby, message: String) -> Error {
    Error::new(ruby.exception_arg_error(), message)
}

pub fn type_error(ruby: &Ruby, message: String) -> Error {
    Error::new(ruby.exception_type_error(), message)
}

pub fn range_error(ruby: &Ruby, message: String) -> Error {
    Error::new(ruby.exception_range_error(), message)
}
