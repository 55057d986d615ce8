{-# LANGUAGE TupleSections, ConstraintKinds, DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies, NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver -fconstraint-solver-iterations=16 #-}
{-|
Recurrent layers (Keras @SimpleRNN@, @LSTM@, @GRU@): a step engine whose
result is fed back. Each time step's input beat @x_t@ (@f@ values) and the
state's @h_(t-1)@ (@u@ values, zero before a sequence's first step) form one
window @x_t ++ h_(t-1)@ of @f + u@ values; the step engine (a "K2C.Engine",
'K2C.Dense.dense' with the kernel and the recurrent kernel stacked in one
ROM) computes the step's sums, and for a gated layer a cell ('lstmCell',
'gruCell', 'gruResetBeforeCell') combines them with the previous state into
the new state. A
sequence is @n@ beats; the block sends every step's @h_t@ (Keras'
@return_sequences=True@: @n@ beats out per sequence) or only the last one's.

= Arithmetic (docs/guide/contract.md, "Recurrent layers")

The window is held in one format that holds both the input's and the state's
values exactly (the larger integer and fraction fields of the two: sign
extension and a left shift, no rounding), so the step engine's exact sum is
@W x_t + U h_(t-1) + b@, rounded once by its finish. 'simple': the finish's
activation gives @h_t@. 'lstm' and 'gru': the finish is linear (the gates'
sums in the output format @SFixed hi hf@) and the cell applies the gate and
the cell activation, multiplies exactly ('K2C.Merge.mulExact') and rounds
each new value once ('K2C.Activation.requantize'):

* LSTM (gates i, f, c, o in Keras' order): @c_t = f * c_(t-1) + i * act(z_c)@,
  @h_t = o * act(c_t)@ with @i, f, o = gate(z)@;
* GRU (@reset_after@; filters z, r, the candidate's input part @x_h@ and its
  recurrent part @r_h@): @h~ = act(x_h + r * r_h)@,
  @h_t = z * h_(t-1) + (1 - z) * h~@;
* GRU with @reset_after=False@ ('gruResetBefore'; filters z, r and the
  candidate, Keras' kernels stacked): two passes a time step, the second on
  the window @x_t ++ round(r * h_(t-1))@, so that the candidate's sum is
  Keras' @W_h x_t + U_h (r * h_(t-1)) + b_h@ rounded once; then
  @h~ = act(sum)@, @h_t = z * h_(t-1) + (1 - z) * h~@.

= Hardware

* the step engine ("K2C.Engine": its knobs are the layer's);
* a gated layer's cell on @l@ units a cycle: the engine's sums scattered into
  @k = u / l@ chunks ("K2C.Scatter"; the ROM's filters are in chunk order),
  each beside its units' previous state ('chunked'), 'CellDepth' register
  stages on 'K2C.Pipe.pipeS' (the gates' table reads and their output
  registers; the products; the cell activation's reads and registers; the
  last products; a reset-before GRU's 'ResetBeforeDepth'), each activation a
  table per lane ("K2C.Lut"), and the new state collected ("K2C.Collect");
* the state (@u@ values, an LSTM's @c@ too, a reset-before GRU's @r * h@ and
  @z@ too and a pass flag), an output register (@u@ values and a valid bit),
  a step counter @Index n@ (@Index (2 * n)@: a reset-before GRU counts its
  passes) and a busy flag; a reset-before GRU's "K2C.Repeat" in front (one
  input beat).

= Protocol and exact timing

One step at a time: the next step needs this step's result.

* Input ready (registered state only, and the engine's ready) = no step in
  the engine. A beat accepted in cycle @a@ is the engine's window in that
  cycle (the engine loads it as it moves: 'K2C.Engine.atAccept'), so its
  result is valid from @a + S + D + 1@ ("K2C.Engine": @S@ steps, depth @D@),
  and a gated layer's cell takes it at once and shows the new state
  @k + 14@ cycles later (the chunks one a cycle through the pipeline, then
  collected).
* The result moves out of the engine in the first cycle @r@ from then in
  which the output register is empty, or at once when the step sends nothing
  (not the last step of a sequence without @return_sequences@); in @r@ the
  state takes it (a sequence's last step sets it back to zero) and, when the
  step sends, the output register takes it: valid from @r + 1@.
* The next beat can move in from @r + 1@. So a step takes @S + D + 2@ cycles
  with downstream always ready (and @k + 14@ more with a cell), a sequence
  @n@ times that.
* A reset-before GRU's time step is two such steps (its cell's @k + 8@ after
  each): "K2C.Repeat" offers each input beat twice (the first copy from the
  cycle after the beat moved in, the second from the cycle after the first
  moved), and only a second pass sends.
-}
module K2C.Recurrent
  ( simple
  , lstm
  , gru
  , gruResetBefore
  , recurrentWith
  , chunked
  , lstmCell
  , gruCell
  , gruResetBeforeCell
  , CellDepth
  , ResetBeforeDepth
  , Sends (..)
  , Window (..)
  ) where

import Clash.Prelude hiding (scatter)
import Data.Maybe (isJust)

import K2C.Activation (requantize)
import K2C.Collect (collect)
import K2C.Merge (addExact, mulExact, subExact, widen)
import K2C.Pipe (pipeS, stageReg)
import K2C.Repeat (repeatS)
import K2C.Scatter (scatter)
import K2C.Stream (Stream, mapS, (|>))

-- | Which steps' states leave the block.
data Sends
  = EveryStep  -- ^ @return_sequences=True@: one beat per step
  | LastStep   -- ^ @return_sequences=False@: one beat per sequence

-- | The format of the step's window, named by a type application:
-- @Window \@(SFixed 6 10)@.
data Window w = Window

-- | A gated cell's register stages: each table read (the gates', then the
-- cell activation's) takes three: the block RAM's address and output
-- registers and a copy in the fabric, so the route from the block RAM's row
-- to the multipliers starts from a flip-flop (waves_gru on ECP5: a table's
-- output register straight into a MULT18X18D, 10.2 ns); the exact products
-- (1: the multipliers' output registers), their exact sum (1), its rounding
-- (1), twice. An LSTM's last products have no sum: they are registered twice.
-- Each product, sum and rounding has its own cycle: a registered product
-- through a 32-bit sum, the rounding and the saturation in one cycle was
-- digits_lstm's critical path (27 logic levels, 11.7 ns).
type CellDepth = 12

-- | 'gruResetBeforeCell''s register stages: the three tables read in
-- parallel (three each, as in 'CellDepth'), the exact products, their exact
-- sum, the roundings.
type ResetBeforeDepth = 6

-- | SimpleRNN: the step is the engine alone (its finish applies the activation).
simple
  :: forall dom n f u xi xf wi wf hi hf
   . ( HiddenClockResetEnable dom, KnownNat n, 1 <= n, KnownNat f, KnownNat u
     , KnownNat xi, KnownNat xf, KnownNat wi, KnownNat wf, KnownNat hi, KnownNat hf )
  => SNat n
  -> Sends
  -> Window (SFixed wi wf)
  -> Stream dom (Vec (f + u) (SFixed wi wf)) (Vec u (SFixed hi hf))
  -> Stream dom (Vec f (SFixed xi xf)) (Vec u (SFixed hi hf))
simple n sends window step = recurrentWith n (sendsAt sends) window id (repeat 0) (const step)

-- | The shape of a gated layer's arguments: steps, which steps send, the
-- window's format, @k@ chunks of @l@ units, the engine (its @g * u@ sums in
-- chunk order), the gate and the cell activations.
type Gated dom g n f u k l xi xf wi wf hi hf =
  SNat n
  -> Sends
  -> Window (SFixed wi wf)
  -> SNat k
  -> SNat l
  -> Stream dom (Vec (f + u) (SFixed wi wf)) (Vec (k * (g * l)) (SFixed hi hf))
  -> (SFixed hi hf -> SFixed hi hf)
  -> (SFixed hi hf -> SFixed hi hf)
  -> Stream dom (Vec f (SFixed xi xf)) (Vec u (SFixed hi hf))

-- | What a gated layer's sizes must satisfy.
type GatedShape dom n f u k l xi xf wi wf hi hf =
  ( HiddenClockResetEnable dom, KnownNat n, 1 <= n, KnownNat f, KnownNat u
  , KnownNat k, 1 <= k, KnownNat l, u ~ (k * l)
  , KnownNat xi, KnownNat xf, KnownNat wi, KnownNat wf, KnownNat hi, KnownNat hf )

-- | LSTM: the engine's @4 * u@ sums, chunk by chunk: @k@ chunks of @l@ units,
-- chunk @j@ holding the sums of gates i, f, c, o (Keras' order) of units
-- @j*l .. j*l+l-1@ (the ROM's filters are in that order); 'lstmCell' on one
-- chunk a cycle with @gate@ and @act@; the state is (h, c).
lstm
  :: forall dom n f u k l xi xf wi wf hi hf
   . GatedShape dom n f u k l xi xf wi wf hi hf => Gated dom 4 n f u k l xi xf wi wf hi hf
lstm n sends window k SNat engine gate act =
  gated n (sendsAt sends) window k fst snd (repeat 0, repeat 0) (const unzip) (SNat @CellDepth)
    (const (lstmCell gate act)) engine

-- | GRU (@reset_after@): the engine's @4 * u@ sums in @k@ chunks of @l@ units
-- (z, r, x_h, r_h of each chunk's units), then 'gruCell' on one chunk a
-- cycle; the state is h.
gru
  :: forall dom n f u k l xi xf wi wf hi hf
   . GatedShape dom n f u k l xi xf wi wf hi hf => Gated dom 4 n f u k l xi xf wi wf hi hf
gru n sends window k SNat engine gate act =
  gated n (sendsAt sends) window k id id (repeat 0) (const id) (SNat @CellDepth) (const (gruCell gate act)) engine

-- | GRU with @reset_after=False@: the candidate reads @r * h_(t-1)@, so the
-- reset gate must be known before the recurrent kernel's product that the
-- candidate needs. Each time step is two passes of one engine whose ROM is
-- Keras' kernel stacked over its recurrent kernel (@3 * u@ sums: z, r and
-- the candidate's, in @k@ chunks of @l@ units), one pass at a time as any
-- step ('recurrentWith' over @2 * n@ steps, each input beat offered twice
-- by "K2C.Repeat"):
--
-- 1. on the window @x_t ++ h_(t-1)@: 'gruResetBeforeCell' keeps
--    @g = gate(z)@ and @rh = round(gate(r) * h_(t-1))@ (the candidate's sum
--    is not read);
-- 2. on the window @x_t ++ rh@: the candidate's sum is then Keras'
--    @W_h x_t + U_h (r * h) + b_h@, rounded once by the engine's finish;
--    the cell gives @h_t = round(g * h_(t-1) + (1 - g) * act(sum))@ (z's and
--    r's sums are not read).
--
-- One engine with the layer's knobs serves both products, rather than a
-- second engine for @U_h@: no more multipliers or ROM than Keras' weights,
-- at twice the time per step. The cell is 'ResetBeforeDepth' registers: the
-- candidate's sum leaves the engine complete, so the three tables are read
-- in parallel, and the products, their sum and the roundings of both passes
-- share the stages after them. The state is each unit's @(h, rh, g)@ and
-- which pass is next; only a second pass sends.
gruResetBefore
  :: forall dom n f u k l xi xf wi wf hi hf
   . GatedShape dom n f u k l xi xf wi wf hi hf => Gated dom 3 n f u k l xi xf wi wf hi hf
gruResetBefore SNat sends window k SNat engine gate act =
  repeatS (SNat @2)
    |> gated (SNat @(2 * n)) secondSends window k hidden previous start collected (SNat @ResetBeforeDepth)
         (gruResetBeforeCell gate act . fmap snd) engine
  where
    -- a time step's second pass (an odd step) sends when its time step does
    secondSends c = odd c && sendsAt sends c
    hidden (v, second) = map (\(h, rh, _) -> if second then rh else h) v
    previous (v, _) = map (\(h, _, g) -> (h, g)) v
    start = (repeat (0, 0, 0), False)
    collected (_, second) v = (v, not second)

-- | A gated layer around @cell@: the engine's sums scattered into @k@ chunks,
-- each beside its units' part (@previous@) of the state, the cell's @d@
-- registers on each, the results collected into the new state
-- (@collected@, from the previous one and the chunks' results); @hidden@ is
-- the state's part that joins the window and leaves the block, @start@ the
-- state at a sequence's start. The cell may read the previous state too: it
-- stays still while a step is in flight.
gated
  :: forall dom g d n f u k l s p o xi xf wi wf hi hf
   . (GatedShape dom n f u k l xi xf wi wf hi hf, KnownNat g, KnownNat d, NFDataX s, NFDataX o)
  => SNat n
  -> (Index n -> Bool)
  -> Window (SFixed wi wf)
  -> SNat k
  -> (s -> Vec u (SFixed hi hf))
  -> (s -> Vec u p)
  -> s
  -> (s -> Vec u o -> s)
  -> SNat d
  -> (Signal dom s -> Signal dom (Maybe (Vec (g * l) (SFixed hi hf), Vec l p)) -> Signal dom (Maybe (Vec l o)))
  -> Stream dom (Vec (f + u) (SFixed wi wf)) (Vec (k * (g * l)) (SFixed hi hf))
  -> Stream dom (Vec f (SFixed xi xf)) (Vec u (SFixed hi hf))
gated n sends window k hidden previous start collected d cell engine =
  recurrentWith n sends window hidden start step
  where
    step prev =
      engine |> scatter k |> chunked k (previous <$> prev)
        |> pipeS d (cell prev)
        |> collect k |> withPrevious prev
    -- combinational: the collected results with the state they follow
    withPrevious prev (input, readyOut) = (fmap <$> (collected <$> prev) <*> input, readyOut)

-- | Each of a step's @k@ chunks of sums beside its units' previous state:
-- chunk @j@ (counted as the chunks move on) with values @j*l .. j*l+l-1@ of
-- @prev@, which stays still while a step is in flight. Combinational: valid
-- and ready pass through.
chunked
  :: forall dom k l g a
   . (HiddenClockResetEnable dom, KnownNat k, 1 <= k, KnownNat l)
  => SNat k
  -> Signal dom (Vec (k * l) a)
  -> Stream dom g (g, Vec l a)
chunked SNat prev (input, readyOut) = (output, readyOut)
  where
    count = register (0 :: Index k) (mux moves (next <$> count) count)
    next j = if j == maxBound then 0 else j + 1
    moves = (isJust <$> input) .&&. readyOut
    output = (\ps j -> fmap (, (unconcatI ps :: Vec k (Vec l a)) !! j)) <$> prev <*> count <*> input

-- | The LSTM cell's 'CellDepth' registers on one chunk: the gates' sums of @l@
-- units (i, f, c, o) and their previous cell state.
lstmCell
  :: forall dom l hi hf
   . (HiddenClockResetEnable dom, KnownNat l, KnownNat hi, KnownNat hf)
  => (SFixed hi hf -> SFixed hi hf)
  -> (SFixed hi hf -> SFixed hi hf)
  -> Signal dom (Maybe (Vec (4 * l) (SFixed hi hf), Vec l (SFixed hi hf)))
  -> Signal dom (Maybe (Vec l (SFixed hi hf, SFixed hi hf)))
lstmCell gate act z = hidden
  where
    gates = stageReg (stageReg (stageReg (fmap activate <$> z)))
    activate (v, c) = case unconcatI v :: Vec 4 (Vec l (SFixed hi hf)) of
      zs -> (map gate (zs !! 0), map gate (zs !! 1), map act (zs !! 2), map gate (zs !! 3), c)
    products = stageReg (fmap (\(i, fg, g, o, c) -> (zipWith mulExact fg c, zipWith mulExact i g, o)) <$> gates)
    summed = stageReg (fmap (\(fc, ig, o) -> (zipWith addExact fc ig, o)) <$> products)
    updated = stageReg (fmap (\(s, o) -> (map requantize s, o)) <$> summed)
    squashed = stageReg (stageReg (stageReg (fmap (\(c, o) -> (c, o, map act c)) <$> updated)))
    outputs = stageReg (stageReg (fmap (\(c, o, t) -> (zipWith mulExact o t, c)) <$> squashed))
    hidden = stageReg (fmap (\(ot, c) -> zip (map requantize ot) c) <$> outputs)

-- | The GRU cell's 'CellDepth' registers on one chunk: the sums of @l@ units
-- (z, r, x_h, r_h) and their previous state.
gruCell
  :: forall dom l hi hf
   . (HiddenClockResetEnable dom, KnownNat l, KnownNat hi, KnownNat hf)
  => (SFixed hi hf -> SFixed hi hf)
  -> (SFixed hi hf -> SFixed hi hf)
  -> Signal dom (Maybe (Vec (4 * l) (SFixed hi hf), Vec l (SFixed hi hf)))
  -> Signal dom (Maybe (Vec l (SFixed hi hf)))
gruCell gate act z = hidden
  where
    gates = stageReg (stageReg (stageReg (fmap activate <$> z)))
    activate (v, h) = case unconcatI v :: Vec 4 (Vec l (SFixed hi hf)) of
      zs -> (map gate (zs !! 0), map gate (zs !! 1), zs !! 2, zs !! 3, h)
    products = stageReg (fmap (\(zg, r, xh, rh, h) -> (zg, map (subExact one) zg, xh, zipWith mulExact r rh, h)) <$> gates)
    summed = stageReg (fmap (\(zg, zc, xh, rp, h) -> (zg, zc, zipWith addExact xh rp, h)) <$> products)
    rounded = stageReg (fmap (\(zg, zc, s, h) -> (zg, zc, map requantize s, h)) <$> summed)
    squashed = stageReg (stageReg (stageReg (fmap (\(zg, zc, s, h) -> (zg, zc, map act s, h)) <$> rounded)))
    mixes = stageReg (fmap (\(zg, zc, cand, h) -> (zipWith mulExact zg h, zipWith mulExact zc cand)) <$> squashed)
    blended = stageReg (fmap (uncurry (zipWith addExact)) <$> mixes)
    hidden = stageReg (fmap (map requantize) <$> blended)
    one = 1 :: SFixed 2 0

-- | The reset-before GRU cell's 'ResetBeforeDepth' registers on one chunk:
-- the sums of @l@ units (z, r, the candidate's), each unit's previous
-- @(h, g)@, and whether this is a time step's second pass. Both passes'
-- work runs on every chunk and the last stage keeps a pass's own: the first
-- pass's @(h, round(gate(r) * h), gate(z))@, the second's
-- @(round(g * h + (1 - g) * act(sum)), _, _)@ (what it leaves in @rh@ and
-- @g@ is not read before the next first pass sets them).
gruResetBeforeCell
  :: forall dom l hi hf
   . (HiddenClockResetEnable dom, KnownNat l, KnownNat hi, KnownNat hf)
  => (SFixed hi hf -> SFixed hi hf)
  -> (SFixed hi hf -> SFixed hi hf)
  -> Signal dom Bool
  -> Signal dom (Maybe (Vec (3 * l) (SFixed hi hf), Vec l (SFixed hi hf, SFixed hi hf)))
  -> Signal dom (Maybe (Vec l (SFixed hi hf, SFixed hi hf, SFixed hi hf)))
gruResetBeforeCell gate act second z = next
  where
    tables = stageReg (stageReg (stageReg (fmap activate <$> z)))
    activate (v, p) = case (unconcatI v :: Vec 3 (Vec l (SFixed hi hf)), unzip p) of
      (zs, (h, g)) -> (map gate (zs !! 0), map gate (zs !! 1), map act (zs !! 2), h, g, map (subExact one) g)
    products = stageReg (fmap multiply <$> tables)
    multiply (zg, r, cand, h, g, gc) = (zg, h, zipWith mulExact r h, zipWith mulExact g h, zipWith mulExact gc cand)
    summed = stageReg (fmap (\(zg, h, rh, gh, gc) -> (zg, h, rh, zipWith addExact gh gc)) <$> products)
    next = stageReg (fmap <$> (finish <$> second) <*> summed)
    finish isSecond (zg, h, rh, s) = zip3 (if isSecond then map requantize s else h) (map requantize rh) zg
    one = 1 :: SFixed 2 0

-- | Whether step @c@ of a sequence sends its state.
sendsAt :: KnownNat n => Sends -> Index n -> Bool
sendsAt EveryStep _ = True
sendsAt LastStep c = c == maxBound

-- | The recurrent layer over sequences of @n@ beats: @step prev@ is the step
-- (the engine, then a cell reading the previous state @prev@) on windows in
-- the format 'Window' names (it holds the input's and the state's values
-- exactly); @sends c@ says whether step @c@ sends its state; @hidden@ is the
-- state's part that joins the window and leaves the block; @start@ the state
-- before a sequence's first step.
recurrentWith
  :: forall dom n f u s xi xf wi wf hi hf
   . ( HiddenClockResetEnable dom, KnownNat n, 1 <= n, KnownNat f, KnownNat u, NFDataX s
     , KnownNat xi, KnownNat xf, KnownNat wi, KnownNat wf, KnownNat hi, KnownNat hf )
  => SNat n
  -> (Index n -> Bool)
  -> Window (SFixed wi wf)
  -> (s -> Vec u (SFixed hi hf))
  -> s
  -> (Signal dom s -> Stream dom (Vec (f + u) (SFixed wi wf)) s)
  -> Stream dom (Vec f (SFixed xi xf)) (Vec u (SFixed hi hf))
recurrentWith SNat sends Window hidden start step (input, readyOut) = (held, readyIn)
  where
    (result, stepReady) = step state (window, resultReady)
    window = mux busy (pure Nothing) (fmap <$> (joinWindow . hidden <$> state) <*> input)
    joinWindow h x = map widen x ++ map widen h

    readyIn = (not <$> busy) .&&. stepReady
    accepted = readyIn .&&. (isJust <$> input)

    lastStep = (== maxBound) <$> count
    sending = sends <$> count
    -- registered state only: the output register is empty, or this step sends nothing
    resultReady = not <$> (sending .&&. (isJust <$> held))
    taken = (isJust <$> result) .&&. resultReady
    leaves = (isJust <$> held) .&&. readyOut

    busy = register False (mux accepted (pure True) (mux taken (pure False) busy))
    count = register (0 :: Index n) (mux taken (next <$> count) count)
    next c = if c == maxBound then 0 else c + 1
    state = register start (mux taken (mux lastStep (pure start) (fromJustX <$> result)) state)
    held = register Nothing (mux (taken .&&. sending) (fmap hidden <$> result) (mux leaves (pure Nothing) held))
