# frozen_string_literal: true

require "fileutils"
require "open3"
require "rubygems/package"

# The precompiled gem (rake native:gem), as an operator with no Rust, no C
# compiler and no Ruby headers installs it: gem install --local into a
# clean GEM_HOME, then the gem at work under each Ruby it is built for,
# with the real bpftrace (0.27 in the root, the host's here) and the
# recorder. Runs in the main lane only (spec/support/lanes.rb): it runs
# every Ruby itself.
RSpec.describe "The precompiled x86_64-linux gem", :e2e do
  include E2E::Recording

  rubies = %w[3.1 3.3 3.4]

  before { cannot_run!(E2E::PlatformGem.unavailable_reason) if E2E::PlatformGem.unavailable_reason }

  let(:gem_path) { E2E::PlatformGem.path }
  let(:package) { Gem::Package.new(gem_path) }
  let(:full_name) { "static_tracing-#{StaticTracing::VERSION}-x86_64-linux" }

  def libraries_of(package)
    package.contents.grep(%r{\Alib/static_tracing/\d+\.\d+/.+\.so\z})
  end

  def place_for(version)
    return E2E::PlatformGem::Host.new if version == RUBY_VERSION[/\A\d+\.\d+/]

    E2E::PlatformGem::Root.new(E2E::PlatformGem.runtime_root, version)
  end

  # gem install --local of the precompiled gem into the place's clean
  # GEM_HOME: nothing built. Returns where it is installed, as the place sees it.
  def install(place)
    output, status = place.capture(place.ruby, "-S", "gem", "install", "--local", "--no-document",
                                   place.copy_in(gem_path))
    expect(status).to be_success, output
    expect(output).to include("Successfully installed #{full_name}")
    expect(output).not_to include("Building native extensions")
    # The only native code installed is the gem's own.
    expect(native_code_in(place.outside(place.gem_home)))
      .to match_array(libraries_of(package).map { |library| File.join("gems", full_name, library) })
    File.join(place.gem_home, "gems", full_name)
  end

  def native_code_in(directory)
    Dir.glob("**/*.so", base: directory)
  end

  it "carries the two native libraries for Ruby #{rubies.join(", ")}, no sources and no build, " \
     "and requires one of those Rubies" do
    expect(File.basename(gem_path)).to eq("#{full_name}.gem")
    spec = package.spec
    expect(spec).to have_attributes(platform: Gem::Platform.new("x86_64-linux"), extensions: [],
                                    executables: ["static-tracing"])
    expect(libraries_of(package)).to match_array(rubies.product(%w[static_tracing trace_reader])
                                                       .map { |abi, name| "lib/static_tracing/#{abi}/#{name}.so" })
    expect(package.contents).to include("lib/static_tracing.rb", "lib/static_tracing/native_library.rb",
                                        "exe/static-tracing", "README.md", "LICENSE")
    expect(package.contents.grep(%r{\A(ext|spec|target|tmp)/|\ACargo\.})).to be_empty

    served = %w[3.1.0 3.1.7 3.3.0 3.3.11 3.4.1 3.4.11]
    not_served = %w[3.0.7 3.2.0 3.2.4 3.2.11 3.5.0.preview1 3.5.0 4.0.0]
    requirement = spec.required_ruby_version
    expect(served.reject { |version| requirement.satisfied_by?(Gem::Version.new(version)) }).to be_empty
    expect(not_served.select { |version| requirement.satisfied_by?(Gem::Version.new(version)) }).to be_empty
  end

  # The versions of glibc's symbols the libraries use: the newest is the
  # oldest glibc they load with, which the README states. They need no
  # library but glibc's and libgcc_s (which every glibc system has).
  it "needs the glibc the README's Install section names, read from the libraries' symbol versions" do
    require_command!("readelf")
    dynamic = Dir.mktmpdir("static_tracing-glibc") do |dir|
      package.extract_files(dir)
      libraries_of(package).map do |library|
        output, status = Open3.capture2e("readelf", "--dynamic", "--version-info", "--wide", File.join(dir, library))
        expect(status).to be_success, output
        output
      end.join
    end
    needed = dynamic.scan(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/).flatten.uniq
    expect(needed).to include("libc.so.6")
    expect(needed - %w[libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 ld-linux-x86-64.so.2
                       libgcc_s.so.1]).to be_empty
    floor = dynamic.scan(/Name: GLIBC_(\d+(?:\.\d+)+)\b/).flatten.max_by { |version| Gem::Version.new(version) }
    install = File.read(File.join(E2E::ROOT, "README.md"))[/^## Install$.*?(?=^## )/m]
    expect(install).to include("glibc #{floor} or later")
  end

  rubies.each do |version|
    context "under Ruby #{version}" do
      let(:place) { place_for(version) }

      after do
        stop_started_processes
        place.remove
      end

      it "installs with no toolchain into a clean GEM_HOME, is seen and counted by bpftrace, records and reports" do
        toolchain, = place.capture("/bin/sh", "-c", "for tool in #{E2E::PlatformGem::TOOLCHAIN.join(" ")}; " \
                                                    'do command -v "$tool"; done; true')
        expect(toolchain).to eq("")
        expect(place.capture(place.ruby, "-e", "print RUBY_VERSION").first).to start_with("#{version}.")

        installed = install(place)
        app = E2E::Repl.new(<<~RUBY, ruby: place.command(place.ruby))
          PROBE = StaticTracing::Tracepoint.new(:packaged, :hello, Integer)
          StaticTracing::Provider.load(:packaged)
        RUBY
        started_processes << app
        expect(app.evaluate('$LOADED_FEATURES.grep(/\.so\z/).grep(/static_tracing/)'))
          .to eq([File.join(installed, "lib", "static_tracing", version, "static_tracing.so")])

        # bpftrace lists the probe, and counts every call made while it is attached.
        listed, = Open3.capture2e(*place.bpftrace, "-l", "usdt:*:packaged:*", "-p", app.pid.to_s)
        expect(listed.lines.map(&:strip)).to include(end_with(":packaged:hello"))
        bpftrace = attach_bpftrace(app.pid, "usdt:*:packaged:hello { @calls = count(); @sum = sum(arg0); }",
                                   bpftrace: place.bpftrace, timeout: 60)
        eventually("bpftrace raised the probe's semaphore") { app.evaluate("PROBE.enabled?") }
        app.evaluate("100.times { |i| PROBE.fire(i) }")
        traced = bpftrace.finish
        expect(traced).to match(/^@calls: 100$/)
        expect(traced).to match(/^@sum: 4950$/)

        # The installed command records the process, then reports the file it wrote.
        command = File.join(place.gem_home, "bin", "static-tracing")
        trace = place.inside(File.join(place.tmp, "packaged.trace"))
        record = E2E::Child.new(*place.command(command, "record", app.pid.to_s, "packaged:*", "-o", trace))
        started_processes << record
        record.wait_for(E2E::Recording::RECORDING, timeout: 30)
        app.evaluate("40.times { |i| PROBE.fire(i) }")
        Process.kill("INT", record.pid)
        expect(record.wait(timeout: 60)).to be_success, record.output
        expect(record.output).to match(wrote_line(40, trace, "interrupted"))
        report, status = place.capture(command, "report", trace)
        expect(status).to be_success, report
        expect(report).to match(/\ARead 1 file: process #{app.pid}, 40 records over \S+; none lost\.$/)
        expect(reported_calls(report)).to eq("packaged:hello" => 40)
      end
    end
  end

  it "refuses, installed, a Ruby it has no libraries for: the message names the Rubies it has and the source gem" do
    place = E2E::PlatformGem::Host.new
    installed = install(place)
    abi = RUBY_VERSION[/\A\d+\.\d+/]
    FileUtils.rm_r(File.join(installed, "lib", "static_tracing", abi))
    output, status = place.capture(place.ruby, "-e", 'require "static_tracing"')
    expect(status).not_to be_success
    expect(output).to include("static_tracing #{StaticTracing::VERSION}, precompiled, has native libraries for " \
                              "Ruby #{(rubies - [abi]).join(" and ")}, none for this Ruby (#{RUBY_VERSION})")
    expect(output).to include("gem install static_tracing --platform ruby")
    expect(output).not_to include("cannot open shared object")
  ensure
    place&.remove
  end
end
