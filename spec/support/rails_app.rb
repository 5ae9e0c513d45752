# frozen_string_literal: true

require "fileutils"
require "json"
require "net/http"
require "rbconfig"
require "tmpdir"

module E2E
  # A minimal Rails app (Debian's Rails, no `rails new`, no network):
  # SQLite, one model, one controller, a view and a cache, with
  # `require "static_tracing/rails"`, written into a directory and served
  # by puma in single mode on a free loopback port. The specs, the bench
  # and the one-liners of docs/rails.md run against it.
  #
  #   GET /users            two queries ("User Load", "User Count"), renders users/index.html.erb
  #   GET /users/:id        one query; 404 for an id that is not there
  #   GET /greeting         Rails.cache.fetch("greeting"): a miss, then hits
  #   GET /static_tracing   JSON: the events static_tracing subscribed to, and
  #                         how many of ActiveSupport::Notifications' listeners
  #                         of each are static_tracing's
  class RailsApp < Child
    USERS = %w[ada grace linus].freeze

    FILES = {
      "config.ru" => <<~RUBY,
        require_relative "config/environment"
        run Rails.application
      RUBY
      "config/application.rb" => <<~RUBY,
        require "rails"
        require "active_record/railtie"
        require "action_controller/railtie"
        require "action_view/railtie"
        require "static_tracing/rails"

        module TracedApp
          class Application < Rails::Application
            config.load_defaults 6.1
            config.root = File.expand_path("..", __dir__)
            config.eager_load = true
            config.secret_key_base = "e2e" * 32
            config.logger = Logger.new($stdout)
            config.log_level = :warn
            config.cache_store = :memory_store
            config.static_tracing.trace_actions = ENV["TRACE_ACTIONS"] == "1"
          end
        end
      RUBY
      "config/environment.rb" => <<~RUBY,
        require_relative "application"
        Rails.application.initialize!
      RUBY
      "config/database.yml" => <<~YAML,
        production:
          adapter: sqlite3
          database: db/production.sqlite3
          pool: 5
      YAML
      "config/routes.rb" => <<~RUBY,
        Rails.application.routes.draw do
          resources :users, only: %i[index show]
          get "greeting", to: "users#greeting"
          get "static_tracing", to: "users#static_tracing"
        end
      RUBY
      "config/initializers/schema.rb" => <<~RUBY,
        ActiveRecord::Schema.verbose = false
        ActiveRecord::Schema.define do
          create_table :users, force: true do |t|
            t.string :name, null: false
          end
        end
        #{USERS.inspect}.each { |name| ActiveRecord::Base.connection.insert("INSERT INTO users (name) VALUES ('\#{name}')") }
      RUBY
      "app/models/application_record.rb" => <<~RUBY,
        class ApplicationRecord < ActiveRecord::Base
          self.abstract_class = true
        end
      RUBY
      "app/models/user.rb" => <<~RUBY,
        class User < ApplicationRecord
        end
      RUBY
      "app/controllers/application_controller.rb" => <<~RUBY,
        class ApplicationController < ActionController::Base
        end
      RUBY
      "app/controllers/users_controller.rb" => <<~RUBY,
        class UsersController < ApplicationController
          def index
            @users = User.order(:id).to_a
            @count = User.count
          end

          def show
            render plain: User.find(params[:id]).name
          end

          def greeting
            render plain: Rails.cache.fetch("greeting") { "hello" }
          end

          def static_tracing
            notifier = ActiveSupport::Notifications.notifier
            listeners = StaticTracing::Rails::EVENTS.keys.to_h do |name|
              ours = notifier.listeners_for(name).count do |listener|
                listener.instance_variable_get(:@delegate).is_a?(StaticTracing::Rails::EventProbe)
              end
              [name, ours]
            end
            render json: { pid: Process.pid, rails: Rails.version, subscribed: StaticTracing::Rails.subscribed_events, listeners: listeners }
          end
        end
      RUBY
      "app/views/users/index.html.erb" => <<~ERB
        <p><%= @count %> users</p>
        <ul><% @users.each do |user| %><li><%= user.name %></li><% end %></ul>
      ERB
    }.freeze

    class << self
      # Why the app cannot be served here, or nil.
      def unavailable_reason
        return @unavailable_reason if defined?(@unavailable_reason)

        @unavailable_reason = Puma.unavailable_reason || begin
          out, status = Open3.capture2e(RbConfig.ruby, "-e", 'require "rails"; require "active_record"; ' \
                                                             'gem "sqlite3"; require "sqlite3"')
          "Rails or sqlite3 cannot be loaded by Ruby #{RUBY_VERSION}: #{out.lines.first&.strip}" unless status.success?
        end
      end

      # Loads static_tracing/rails (and with it Rails) into this process, for
      # the in-process examples tagged :rails; why it cannot, or nil.
      def load_problem
        return @load_problem if defined?(@load_problem)

        @load_problem = begin
          require "static_tracing/rails"
          nil
        rescue LoadError => e
          "static_tracing/rails cannot be loaded by Ruby #{RUBY_VERSION}: #{e.message.lines.first.strip}"
        end
      end

      # Writes the app into +dir+; returns +dir+.
      def write(dir)
        FILES.each do |path, content|
          file = File.join(dir, path)
          FileUtils.mkdir_p(File.dirname(file))
          File.write(file, content)
        end
        FileUtils.mkdir_p(File.join(dir, "db"))
        dir
      end
    end

    attr_reader :port, :root

    # Serves a fresh copy of the app with puma (one thread, so that one
    # database connection serves every request and no new connection's
    # setup queries show among the ones a spec counts). +env+: e.g.
    # STATIC_TRACING_MODE, TRACE_ACTIONS.
    def initialize(env: {})
      @root = RailsApp.write(Dir.mktmpdir("static_tracing-rails"))
      @port = E2E.free_port
      super(RbConfig.ruby, Puma.executable, "-I", LIB, "--dir", @root, "-e", "production", "-t", "1:1",
            "-b", "tcp://127.0.0.1:#{@port}", File.join(@root, "config.ru"), env:)
      wait_for(/Use Ctrl-C to stop/, timeout: 60)
    end

    def kill
      super
      FileUtils.rm_rf(@root)
    end

    # [status code, body] of GET +path+.
    def request(path)
      Net::HTTP.start("127.0.0.1", @port, open_timeout: 5, read_timeout: 20) do |http|
        response = http.get(path)
        [response.code.to_i, response.body]
      end
    end

    # The body of GET +path+; raises unless the answer is +status+.
    def get(path, status: 200)
      code, body = request(path)
      raise "GET #{path}: #{code} (expected #{status}) #{body}" unless code == status

      body
    end

    # What GET /static_tracing says.
    def tracing
      JSON.parse(get("/static_tracing"))
    end

    def name
      "Rails app under puma #{pid}"
    end
  end

  module Helpers
    def start_rails_app(**options)
      reason = RailsApp.unavailable_reason
      cannot_run!(reason, component: :rails) if reason
      RailsApp.new(**options).tap { |app| started_processes << app }
    end
  end
end
