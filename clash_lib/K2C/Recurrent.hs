{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies, NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
A recurrent layer (Keras @SimpleRNN@): a step engine whose result is fed back.
Each time step's input beat @x_t@ (@f@ values) and the state @h_(t-1)@ (@u@
values, zero before a sequence's first step) form one window @x_t ++ h_(t-1)@
of @f + u@ values; the step engine (a "K2C.Engine", e.g. 'K2C.Dense.dense'
with the kernel and the recurrent kernel stacked in one ROM) turns it into
@h_t@, which becomes the state. A sequence is @n@ beats; the block sends
every step's state (Keras' @return_sequences=True@: @n@ beats out per
sequence) or only the last one's (one beat).

= Arithmetic (docs/guide/contract.md, "Recurrent layers")

The window is held in one format that holds both the input's and the state's
values exactly (the larger integer and fraction fields of the two: sign
extension and a left shift, no rounding), so the step engine's exact sum is
@W x_t + U h_(t-1) + b@ and its finish (requantization, then the activation)
gives @h_t@ in the layer's output format: one rounding per step.

= Hardware

* the step engine ("K2C.Engine": its knobs are the layer's);
* the state (@u@ values), an output register (@u@ values and a valid bit), a
  step counter @Index n@ and a busy flag.

= Protocol and exact timing

One step at a time: the next step needs this step's result.

* Input ready (registered state only, and the engine's ready) = no step in
  the engine. A beat accepted in cycle @a@ is the engine's window in that
  cycle (the engine loads it as it moves: 'K2C.Engine.atAccept'), so its
  result is valid from @a + S + D + 1@ ("K2C.Engine": @S@ steps, depth @D@).
* The result moves out of the engine in the first cycle @r@ from then in
  which the output register is empty, or at once when the step sends nothing
  (not the last step of a sequence without @return_sequences@); in @r@ the
  state takes it (a sequence's last step sets it back to zero) and, when the
  step sends, the output register takes it: valid from @r + 1@.
* The next beat can move in from @r + 1@. So a step takes @S + D + 2@ cycles
  with downstream always ready, a sequence @n@ times that.
-}
module K2C.Recurrent
  ( recurrent
  , Sends (..)
  , Window (..)
  ) where

import Clash.Prelude
import Data.Maybe (isJust)

import K2C.Stream (Stream)

-- | Which steps' states leave the block.
data Sends
  = EveryStep  -- ^ @return_sequences=True@: one beat per step
  | LastStep   -- ^ @return_sequences=False@: one beat per sequence

-- | The format of the step's window, named by a type application:
-- @Window \@(SFixed 6 10)@.
data Window w = Window

-- | Exact widening to a format with at least as many integer and fraction
-- bits: sign extension, then a left shift by the extra fraction bits.
widen
  :: forall i f oi fo
   . (KnownNat i, KnownNat f, KnownNat oi, KnownNat fo)
  => SFixed i f -> SFixed oi fo
widen x = sf (SNat @fo) (shiftL (resize (unSF x)) (natToNum @fo - natToNum @f))

-- | The recurrent layer over sequences of @n@ beats around @step@, the step
-- engine on windows in the format 'Window' names (it the format
-- holds the input's and the state's values exactly; module header).
recurrent
  :: forall dom n f u xi xf wi wf hi hf
   . ( HiddenClockResetEnable dom, KnownNat n, 1 <= n, KnownNat f, KnownNat u
     , KnownNat xi, KnownNat xf, KnownNat wi, KnownNat wf, KnownNat hi, KnownNat hf )
  => SNat n
  -> Sends
  -> Window (SFixed wi wf)
  -> Stream dom (Vec (f + u) (SFixed wi wf)) (Vec u (SFixed hi hf))
  -> Stream dom (Vec f (SFixed xi xf)) (Vec u (SFixed hi hf))
recurrent SNat sends Window step (input, readyOut) = (held, readyIn)
  where
    (result, stepReady) = step (window, resultReady)
    window = mux busy (pure Nothing) (fmap <$> (joinWindow <$> state) <*> input)
    joinWindow h x = map widen x ++ map widen h

    readyIn = (not <$> busy) .&&. stepReady
    accepted = readyIn .&&. (isJust <$> input)

    lastStep = (== maxBound) <$> count
    sending = case sends of
      EveryStep -> pure True
      LastStep -> lastStep
    -- registered state only: the output register is empty, or this step sends nothing
    resultReady = not <$> (sending .&&. (isJust <$> held))
    taken = (isJust <$> result) .&&. resultReady
    leaves = (isJust <$> held) .&&. readyOut

    busy = register False (mux accepted (pure True) (mux taken (pure False) busy))
    count = register (0 :: Index n) (mux taken (next <$> count) count)
    next c = if c == maxBound then 0 else c + 1
    state = register (repeat 0) (mux taken (mux lastStep (pure (repeat 0)) (fromJustX <$> result)) state)
    held = register Nothing (mux (taken .&&. sending) result (mux leaves (pure Nothing) held))
