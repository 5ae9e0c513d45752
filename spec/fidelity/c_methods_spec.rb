# frozen_string_literal: true

# A traced C method behaves as untraced: the $~ it sets is where its caller
# and the blocks given to it read it, and it has its own arity and
# parameters. (Its wrapper is written in C: MethodWrapper.define_c.)
RSpec.describe "Traced C methods" do
  include FidelityHelpers

  after { StaticTracing.disable! }

  # A String subclass with C methods of its own (String's, defined anew),
  # traced: tracing String itself would reach the whole test process.
  let(:text_class) do
    klass = Class.new(String) do
      %i[gsub sub encode].each { |name| define_method(name, String.instance_method(name)) }
    end
    stub_const("FidelityText", klass)
    %i[gsub sub encode].each { |name| StaticTracing.latency(klass, name) }
    klass
  end

  let(:list_class) do
    klass = Class.new(Array) { define_method(:at, Array.instance_method(:at)) }
    stub_const("FidelityList", klass)
    StaticTracing.latency(klass, :at)
    klass
  end

  it "let a block given to them read $~, and their caller after the call" do
    enable_and_check_wrapped(text_class, :gsub)
    expect(text_class.new("ab cd").gsub(/(\w)(\w)/) { "#{Regexp.last_match(2)}#{Regexp.last_match(1)}" })
      .to eq("ba dc")
    text_class.new("xbz").sub(/(b)/, "q")
    expect(Regexp.last_match&.[](1)).to eq("b")
  end

  it "keep their parameters and arity, and reject wrong arguments as untraced" do
    gsub = String.instance_method(:gsub)
    at = Array.instance_method(:at)
    enable_and_check_wrapped(list_class, :at)
    enable_and_check_wrapped(text_class, :gsub)
    expect([text_class.instance_method(:gsub).parameters, text_class.instance_method(:gsub).arity])
      .to eq([gsub.parameters, gsub.arity])
    expect([list_class.instance_method(:at).parameters, list_class.instance_method(:at).arity])
      .to eq([at.parameters, at.arity])
    expect { list_class.new.at }.to raise_error(ArgumentError, /given 0, expected 1/)
    expect(list_class.new([1, 2]).at(1)).to eq(2)
  end

  it "find their tracepoint after the heap is compacted" do
    enable_and_check_wrapped(text_class, :gsub)
    GC.verify_compaction_references(double_heap: true, toward: :empty)
    expect(text_class.new("ab").gsub(/(\w)/) { Regexp.last_match(1).upcase }).to eq("AB")
  end

  it "pass keywords on as keywords" do
    enable_and_check_wrapped(text_class, :encode)
    expect(text_class.new("a\xFF").encode("UTF-16LE", invalid: :replace)).to eq("a\uFFFD".encode("UTF-16LE"))
  end

  it "call through untraced inside a non-main Ractor" do
    enable_and_check_wrapped(text_class, :gsub)
    ractor = Ractor.new { FidelityText.new("ab").gsub(/(\w)/) { Regexp.last_match(1).upcase } }
    expect(ractor.take).to eq("AB")
  end

  describe "with a tracer attached", :e2e do
    let(:app) do
      ruby_repl(<<~RUBY)
        StaticTracing.latency(String, :gsub)
        StaticTracing::MethodTracing.trace(Array, kind: :stack, only: [:at], inherited: false)
        StaticTracing.enable!
        def swap(text) = text.gsub(/(\\w)(\\w)/) { "\#{$2}\#{$1}" }
      RUBY
    end

    it "time the call and fire the stack, the block reading $~ all along" do
      wait_until_listed(app.pid, "usdt:*:string:gsub")
      wait_until_listed(app.pid, "usdt:*:array_stack:at")
      tracer = attach_bpftrace(app.pid, "usdt:*:string:gsub { @calls = count(); @ns = sum(arg0); } " \
                                        'usdt:*:array_stack:at { printf("stack %s\\n", str(arg0)); }')
      expect(app.evaluate('Array.new(3) { swap("ab cd") }')).to eq(["ba dc"] * 3)
      expect(app.evaluate("[7, 8].at(1)")).to eq(8)
      output = tracer.finish(after: /^stack /)
      expect(output).to match(/^@calls: 3$/)
      expect(output[/^@ns: (\d+)$/, 1].to_i).to be_positive
      expect(output).to match(/^stack .*;Array#at$/)
      expect(output).not_to match(/Array#at;Array#at/)
    end
  end
end
