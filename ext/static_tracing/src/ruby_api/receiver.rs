//! The receiver of a hot method, checked without `rb_protect`.
//!
//! magnus converts `self` with `rb_check_typeddata` inside `rb_protect`
//! (a setjmp) on every call, which is a third of the cost of `fire`. None of
//! our classes is subclassed on the native side, so an exact comparison of
//! the data type pointer is the same check, and it cannot raise.

use magnus::{rb_sys::AsRawValue, typed_data::DataType, RClass, TypedData, Value};
use rb_sys::{
    rb_data_type_t, ruby_value_type, RB_TYPE_P, RTYPEDDATA_GET_DATA, RTYPEDDATA_P, RTYPEDDATA_TYPE,
    VALUE,
};

/// `value` as a `&T` if it is an object wrapping a `T`, else `None`.
#[inline]
pub fn receiver<T: TypedData>(value: &Value) -> Option<&T> {
    let raw = value.as_raw();
    // `DataType` is a transparent wrapper of `rb_data_type_t`.
    let expected = (T::data_type() as *const DataType).cast::<rb_data_type_t>();
    // SAFETY: RB_TYPE_P accepts any VALUE (immediates included); the
    // RTYPEDDATA_* accessors are only reached for T_DATA objects, and the
    // data of an object of our data type is a live `T` owned by the object,
    // which outlives the borrow of `value` (the caller's receiver).
    unsafe {
        if !RB_TYPE_P(raw, ruby_value_type::RUBY_T_DATA)
            || !RTYPEDDATA_P(raw)
            || RTYPEDDATA_TYPE(raw) != expected
        {
            return None;
        }
        RTYPEDDATA_GET_DATA(raw).cast::<T>().as_ref()
    }
}

/// Defines `name` on `class` as a plain C method taking no argument, for
/// the hottest path there is: the is-enabled check in every armed wrapper.
/// magnus's method glue costs about 2 ns a call more, a tenth of the check.
/// `method` must not raise (nothing may unwind through it) and must
/// accept any receiver Ruby passes (an instance of `class`).
pub fn define_plain_method0(
    class: RClass,
    name: &'static std::ffi::CStr,
    method: unsafe extern "C" fn(VALUE) -> VALUE,
) {
    type AnyArity = unsafe extern "C" fn() -> VALUE;
    // SAFETY: arity 0 tells Ruby to call `method` with the receiver only,
    // which is its signature; Ruby stores it as the type-erased pointer.
    unsafe {
        rb_sys::rb_define_method(
            class.as_raw(),
            name.as_ptr(),
            Some(std::mem::transmute::<
                unsafe extern "C" fn(VALUE) -> VALUE,
                AnyArity,
            >(method)),
            0,
        );
    }
}
